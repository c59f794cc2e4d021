package hashspec

import (
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"golang.org/x/text/unicode/norm"
)

// HCL and JSON must read one spec the same way. HCL differs from our JSON
// decoder in two ways, both silent: an object written with a key twice
// keeps the last value (JSON refuses it), and every string is composed to
// Unicode NFC on its way into a value (JSON keeps the bytes), so a bind
// source written decomposed names another host path in each format. Both
// are refused here, as JSON refuses the first and Validate the second.

// nfcMsg is the error for text that is not in NFC, in either format.
const nfcMsg = "must be in Unicode normalization form C (NFC): the decomposed form names other bytes (another host path, say)"

// checkHCLText refuses, in a parsed HCL file, text that HCL would compose
// to NFC and object keys written twice.
func checkHCLText(body *hclsyntax.Body, data []byte, filename string, idx *hclIndex) error {
	tokens, _ := hclsyntax.LexConfig(data, filename, hcl.InitialPos)
	for _, tok := range tokens {
		var text string
		switch tok.Type {
		case hclsyntax.TokenQuotedLit:
			text = unescapeHCL(string(tok.Bytes))
		case hclsyntax.TokenStringLit, hclsyntax.TokenIdent:
			text = string(tok.Bytes)
		default:
			continue
		}
		if !norm.NFC.IsNormalString(text) {
			return &ParseError{Filename: filename, Line: tok.Range.Start.Line, Field: idx.at(tok.Range.Start), Msg: nfcMsg}
		}
	}
	return duplicateKeys(body, filename, idx)
}

// duplicateKeys refuses an object constructor (env, labels) that writes
// one key twice.
func duplicateKeys(body *hclsyntax.Body, filename string, idx *hclIndex) error {
	var err error
	_ = hclsyntax.VisitAll(body, func(n hclsyntax.Node) hcl.Diagnostics {
		obj, ok := n.(*hclsyntax.ObjectConsExpr)
		if !ok || err != nil {
			return nil
		}
		seen := map[string]bool{}
		for _, item := range obj.Items {
			key, ok := hclKey(item.KeyExpr)
			if !ok {
				continue // not a constant key: decoding reports it
			}
			if seen[key] {
				start := item.KeyExpr.Range().Start
				err = &ParseError{Filename: filename, Line: start.Line, Field: keyPath(idx.at(start), key), Msg: "duplicate key"}
				return nil
			}
			seen[key] = true
		}
		return nil
	})
	return err
}

// hclKey is the string an object key stands for, as decoding makes it.
func hclKey(expr hclsyntax.Expression) (string, bool) {
	v, diags := expr.Value(nil)
	if diags.HasErrors() || !v.IsWhollyKnown() || v.IsNull() {
		return "", false
	}
	s, err := convert.Convert(v, cty.String)
	if err != nil || s.IsNull() {
		return "", false
	}
	return s.AsString(), true
}

// unescapeHCL decodes the escapes of a quoted HCL literal that can
// produce non-ASCII (\u, \U); the others stand for ASCII, which is NFC
// whatever follows it, and are kept as a placeholder that is too.
func unescapeHCL(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		n := map[byte]int{'u': 4, 'U': 8}[s[i+1]]
		if n > 0 && i+2+n <= len(s) {
			if r, err := strconv.ParseUint(s[i+2:i+2+n], 16, 32); err == nil {
				b.WriteRune(rune(r))
				i += 1 + n
				continue
			}
		}
		b.WriteByte('_')
		i++
	}
	return b.String()
}
