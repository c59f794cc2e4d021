package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/alecthomas/kong"
)

// loadConfig reads a --config file: one JSON object whose keys are flag
// names, with dashes or underscores ("consul_addr", "allow-bind").
//
// It is stricter than kong.JSON on purpose: a misspelt key that is quietly
// ignored is how a node ends up with a setting nobody chose, so unknown
// keys are an error that names them. Precedence is command line, then
// environment (ROLLAGENT_*, CONSUL_*), then this file, then defaults: the
// unit file or container that sets a variable is the more specific source.
func loadConfig(r io.Reader) (kong.Resolver, error) {
	name := "config file"
	if f, ok := r.(*os.File); ok {
		name = f.Name()
	}
	dec := json.NewDecoder(r)
	dec.UseNumber()
	var values map[string]any
	if err := dec.Decode(&values); err != nil {
		return nil, fmt.Errorf("%s: not a JSON object of flag values: %w", name, err)
	}
	norm := make(map[string]any, len(values))
	for k, v := range values {
		if n, ok := v.(json.Number); ok {
			v = n.String() // kong parses numbers from their text, like a flag's
		}
		norm[configKey(k)] = v
	}
	return &configResolver{file: name, values: norm}, nil
}

func configKey(flag string) string { return strings.ReplaceAll(flag, "-", "_") }

type configResolver struct {
	file   string
	values map[string]any
}

// Validate rejects keys that are no flag of any command, so one file can
// serve `run` and the operator commands alike.
func (c *configResolver) Validate(app *kong.Application) error {
	known := map[string]bool{}
	var walk func(n *kong.Node)
	walk = func(n *kong.Node) {
		for _, f := range n.Flags {
			known[configKey(f.Name)] = true
		}
		for _, ch := range n.Children {
			walk(ch)
		}
	}
	walk(app.Node)
	delete(known, "help")
	delete(known, "config")
	var unknown []string
	for k := range c.values {
		if !known[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return fmt.Errorf("%s: unknown setting(s) %s: keys are flag names, as in `rollagent run --help`",
			c.file, strings.Join(unknown, ", "))
	}
	return nil
}

// Resolve gives the file's value for f unless the environment sets it.
func (c *configResolver) Resolve(_ *kong.Context, _ *kong.Path, f *kong.Flag) (any, error) {
	for _, env := range f.Tag.Envs {
		if _, ok := os.LookupEnv(env); ok {
			return nil, nil
		}
	}
	v, ok := c.values[configKey(f.Name)]
	if !ok {
		return nil, nil
	}
	return v, nil
}
