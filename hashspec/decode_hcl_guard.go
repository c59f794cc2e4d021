package hashspec

import (
	"fmt"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// The HCL parser is recursive descent without a depth limit: a spec of
// one megabyte of "[" (or "-", "!", "{", "${") overflows the goroutine
// stack, and a stack overflow kills the whole process rather than
// returning an error. So the tokens are checked with the (iterative)
// lexer before the parser ever sees them. No real spec comes near these
// limits.
const (
	maxHCLNesting      = 64 // brackets, braces, parens, quotes, templates
	maxHCLUnaryRun     = 16 // consecutive "-" / "!" operators
	maxHCLTemplateCtrl = 64 // "%{" directives: thousands take seconds to parse
)

func guardHCL(data []byte, filename string) error {
	tokens, _ := hclsyntax.LexConfig(data, filename, hcl.InitialPos)
	depth, unary, ctrl := 0, 0, 0
	for _, tok := range tokens {
		switch tok.Type {
		case hclsyntax.TokenOBrace, hclsyntax.TokenOBrack, hclsyntax.TokenOParen,
			hclsyntax.TokenOQuote, hclsyntax.TokenOHeredoc, hclsyntax.TokenTemplateInterp:
			depth++
		case hclsyntax.TokenTemplateControl:
			depth++
			ctrl++
		case hclsyntax.TokenCBrace, hclsyntax.TokenCBrack, hclsyntax.TokenCParen,
			hclsyntax.TokenCQuote, hclsyntax.TokenCHeredoc, hclsyntax.TokenTemplateSeqEnd:
			depth = max(depth-1, 0)
		}
		switch tok.Type {
		case hclsyntax.TokenMinus, hclsyntax.TokenBang:
			unary++
		case hclsyntax.TokenNewline, hclsyntax.TokenComment:
			// The parser skips these inside brackets, so they do not
			// break a chain of operators.
		default:
			unary = 0
		}
		if msg := hclLimitProblem(depth, unary, ctrl); msg != "" {
			return &ParseError{Filename: filename, Line: tok.Range.Start.Line, Msg: msg}
		}
	}
	return nil
}

func hclLimitProblem(depth, unary, ctrl int) string {
	switch {
	case depth > maxHCLNesting:
		return fmt.Sprintf("nested more than %d levels deep", maxHCLNesting)
	case unary > maxHCLUnaryRun:
		return fmt.Sprintf("more than %d operators in a row", maxHCLUnaryRun)
	case ctrl > maxHCLTemplateCtrl:
		return fmt.Sprintf("more than %d template directives", maxHCLTemplateCtrl)
	}
	return ""
}
