package config

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
)

// noFileKeys are run flags no config file may set: secrets belong in the
// environment, and a per-run choice (the task, output shape) in the
// command line.
var noFileKeys = map[string]string{
	"api-key":     "keys come from OPENAI_API_KEY / ANTHROPIC_API_KEY, not from a file",
	"api-key-env": "an endpoint's key variable is bound to it in [endpoints.\"URL\"] api_key_env of ~/.keel/config.toml",
	"task-file":   "the task is given per run",
	"json":        "the output format is chosen per run",
}

// noProjectKeys are run flags a repository's own file may not set: they
// would let a cloned repository choose where its agent works or lift its
// isolation.
var noProjectKeys = map[string]string{
	"workspace": "the project file is found in the workspace",
}

// pathFlags hold a file path: a relative one in a config file is
// relative to the file's directory (the workspace for a project file).
var pathFlags = map[string]bool{"policy": true, "system-file": true, "workspace": true}

// Layer is one config file's run defaults: the settings of keel run and
// keel chat come from the user's config.toml ([run], and the older
// top-level model and sandbox), the repository's .keel/config.toml in
// the workspace (the same keys, overriding the user's), and the command
// line, overriding both. Every flag of keel run can be a default this
// way; its key is the flag's name (max_steps or max-steps).
type Layer struct {
	path   string
	dir    string // relative paths are relative to it
	values map[string]any
	// project is set for the repository's file.
	project bool
}

// Sets reports whether the layer sets the flag name.
func (l *Layer) Sets(name string) bool {
	_, ok := l.values[name]
	return ok
}

// NewLayer returns c's run defaults, the top-level model and sandbox
// included, with relative paths relative to dir; project marks the
// repository's file. It returns nil for no file.
func NewLayer(c *Config, dir string, project bool) (*Layer, error) {
	if c == nil || c.Path == "" {
		return nil, nil
	}
	l := &Layer{path: c.Path, dir: dir, values: map[string]any{}, project: project}
	for k, v := range c.Run {
		name := strings.ReplaceAll(k, "_", "-")
		if _, dup := l.values[name]; dup {
			return nil, fmt.Errorf("%s: [run] sets %s twice", c.Path, name)
		}
		l.values[name] = v
	}
	for name, v := range map[string]string{"model": c.Model, "sandbox": c.Sandbox} {
		if v == "" {
			continue
		}
		if _, dup := l.values[name]; dup {
			return nil, fmt.Errorf("%s: %s is set both at the top and in [run]: keep one", c.Path, name)
		}
		l.values[name] = v
	}
	return l, nil
}

// flagText is v as the text of a flag value.
func flagText(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case bool:
		return strconv.FormatBool(x), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	}
	return "", fmt.Errorf("a %T is not a flag value (want a string, number or boolean)", v)
}

// repeatable reports whether f may be given several times.
func repeatable(f *pflag.Flag) bool {
	t := f.Value.Type()
	return strings.HasSuffix(t, "Array") || strings.HasSuffix(t, "Slice")
}

// Apply sets the flags of fl that the command line left alone (given)
// from l, recording in source where each came from.
func (l *Layer) Apply(fl *pflag.FlagSet, given map[string]bool, source map[string]string) error {
	names := make([]string, 0, len(l.values))
	for k := range l.values {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, name := range names {
		v := l.values[name]
		f := fl.Lookup(name)
		if f == nil || f.Hidden {
			return fmt.Errorf("%s: %s is not a flag of keel run (see keel run --help; keys are flag names, max_steps or max-steps)", l.path, name)
		}
		if why, ok := noFileKeys[name]; ok {
			return fmt.Errorf("%s: %s cannot be set in a config file: %s", l.path, name, why)
		}
		if why, ok := noProjectKeys[name]; ok && l.project {
			return fmt.Errorf("%s: %s cannot be set in a project file: %s", l.path, name, why)
		}
		if given[name] {
			continue // the command line wins
		}
		var texts []string
		if list, ok := v.([]any); ok {
			if !repeatable(f) {
				return fmt.Errorf("%s: %s takes one value, not a list", l.path, name)
			}
			for _, e := range list {
				s, err := flagText(e)
				if err != nil {
					return fmt.Errorf("%s: %s: %v", l.path, name, err)
				}
				texts = append(texts, s)
			}
		} else {
			s, err := flagText(v)
			if err != nil {
				return fmt.Errorf("%s: %s: %v", l.path, name, err)
			}
			texts = []string{s}
		}
		if pathFlags[name] {
			for i, s := range texts {
				if s != "" && s != "default" && !filepath.IsAbs(s) {
					texts[i] = filepath.Join(l.dir, s)
				}
			}
		}
		if name == "sandbox" && l.project && slices.Contains(texts, "none") {
			return fmt.Errorf("%s: a project file cannot turn the sandbox off (sandbox = \"none\"): give --sandbox none yourself", l.path)
		}
		// A later layer replaces an earlier one's list: reset it first.
		if r, ok := f.Value.(pflag.SliceValue); ok {
			if err := r.Replace(nil); err != nil {
				return fmt.Errorf("%s: %s: %v", l.path, name, err)
			}
		}
		for _, s := range texts {
			if err := f.Value.Set(s); err != nil {
				return fmt.Errorf("%s: %s = %q: %v", l.path, name, s, err)
			}
		}
		source[name] = l.path
	}
	return nil
}
