package hashspec

import (
	"encoding/json"
	"reflect"
	"strconv"
)

// walkValue checks one value whose first token is tok. null is accepted
// everywhere below the top level and means the same as an omitted field.
func (w *jsonWalker) walkValue(t reflect.Type, p string, tok json.Token) error {
	if tok == nil {
		return nil
	}
	if t == durationType {
		return w.walkDuration(p, tok)
	}
	if t == amountType {
		return w.walkAmount(p, tok)
	}
	switch t.Kind() {
	case reflect.Pointer:
		return w.walkValue(t.Elem(), p, tok)
	case reflect.String:
		if _, ok := tok.(string); !ok {
			w.fail(p, "must be a string, got %s", describe(tok))
		}
	case reflect.Int:
		w.walkInt(p, tok)
	case reflect.Bool:
		if _, ok := tok.(bool); !ok {
			w.fail(p, "must be true or false, got %s", describe(tok))
		}
	case reflect.Slice:
		return w.walkSlice(t, p, tok)
	case reflect.Map:
		if tok != json.Delim('{') {
			w.fail(p, "must be an object of strings, got %s", describe(tok))
			return w.skip(tok)
		}
		return w.walkObject(p, func(key string, val json.Token) error {
			return w.walkElem(t.Elem(), keyPath(p, key), val)
		})
	case reflect.Struct:
		if tok != json.Delim('{') {
			w.fail(p, "must be an object, got %s", describe(tok))
			return w.skip(tok)
		}
		return w.walkStruct(t, p)
	}
	return w.skip(tok)
}

// walkElem is walkValue for array elements and map values, where
// encoding/json would turn null into "" or a zero struct: that is a
// different spec from the one written, so null is rejected there.
func (w *jsonWalker) walkElem(t reflect.Type, p string, tok json.Token) error {
	if tok == nil {
		w.fail(p, "must not be null")
		return nil
	}
	return w.walkValue(t, p, tok)
}

func (w *jsonWalker) walkDuration(p string, tok json.Token) error {
	s, ok := tok.(string)
	if !ok {
		w.fail(p, `must be a duration string such as "10s", got %s`, describe(tok))
		return w.skip(tok)
	}
	if _, err := parseDuration(s); err != nil {
		w.fail(p, "%s", err.Error())
	}
	return nil
}

// walkAmount accepts an integer (a count) or a percentage string.
func (w *jsonWalker) walkAmount(p string, tok json.Token) error {
	if s, ok := tok.(string); ok {
		if _, err := parsePercent(s); err != nil {
			w.fail(p, "%s", err.Error())
		}
		return nil
	}
	if _, ok := tok.(json.Number); !ok {
		w.fail(p, `must be an integer or a percentage such as "25%%", got %s`, describe(tok))
		return w.skip(tok)
	}
	w.walkInt(p, tok)
	return nil
}

func (w *jsonWalker) walkInt(p string, tok json.Token) {
	n, ok := tok.(json.Number)
	if !ok {
		w.fail(p, "must be an integer, got %s", describe(tok))
		return
	}
	if _, err := strconv.ParseInt(string(n), 10, strconv.IntSize); err != nil {
		w.fail(p, "must be an integer, got %s", n)
	}
}

func (w *jsonWalker) walkSlice(t reflect.Type, p string, tok json.Token) error {
	if tok != json.Delim('[') {
		w.fail(p, "must be an array, got %s", describe(tok))
		return w.skip(tok)
	}
	for i := 0; ; i++ {
		el, err := w.token()
		if err != nil {
			return err
		}
		if el == json.Delim(']') {
			return nil
		}
		if err := w.walkElem(t.Elem(), indexPath(p, i), el); err != nil {
			return err
		}
	}
}

// skip consumes the rest of a value whose first token was tok.
func (w *jsonWalker) skip(tok json.Token) error {
	if tok != json.Delim('{') && tok != json.Delim('[') {
		return nil
	}
	for depth := 1; depth > 0; {
		t, err := w.token()
		if err != nil {
			return err
		}
		switch t {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
	return nil
}

func describe(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		if v == '{' {
			return "an object"
		}
		return "an array"
	case string:
		return "a string"
	case json.Number:
		return "the number " + string(v)
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return "an unexpected value"
}
