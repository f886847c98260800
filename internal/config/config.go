// Package config reads Keel's configuration: the user's config file
// (~/.keel/config.toml, or $KEEL_HOME/config.toml) and the environment.
// It is, with internal/cli, the only place that reads files and
// environment variables for the library packages, which take options
// structs instead.
package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/BurntSushi/toml"

	"github.com/keel-run/keel/model"
)

// Config is the content of config.toml. Every field is optional.
//
//	model = "openai:gpt-4o"          # default --model
//	sandbox = "linux"                # default --sandbox
//	[prices."deepseek-chat"]         # USD per million tokens
//	input = 0.27
//	output = 1.10
//	cached_input = 0.07
type Config struct {
	Model   string                 `toml:"model"`
	Sandbox string                 `toml:"sandbox"`
	DB      string                 `toml:"db"`
	Prices  map[string]model.Price `toml:"prices"`
	// Memory caps the bytes of AGENTS.md / KEEL.md memory files put in
	// the system prompt.
	MemoryMaxBytes int `toml:"memory_max_bytes"`
}

// Home returns Keel's state directory: $KEEL_HOME if set, else ~/.keel.
func Home(getenv func(string) string) (string, error) {
	if h := getenv("KEEL_HOME"); h != "" {
		return h, nil
	}
	home := getenv("HOME")
	if home == "" {
		var err error
		home, err = os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("config: no home directory: set KEEL_HOME or HOME: %w", err)
		}
	}
	return filepath.Join(home, ".keel"), nil
}

// Load reads dir/config.toml. A missing file is an empty Config; a file
// that does not parse is an error naming the file, line and problem, and
// unknown keys are reported as errors (a typo must not be ignored).
func Load(dir string) (*Config, error) {
	p := filepath.Join(dir, "config.toml")
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return &Config{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var c Config
	md, err := toml.Decode(string(b), &c)
	if err != nil {
		return nil, fmt.Errorf("config: %s: %w", p, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		return nil, fmt.Errorf("config: %s: unknown key %q", p, und[0].String())
	}
	for name, pr := range c.Prices {
		if pr.Input < 0 || pr.Output < 0 || pr.CachedInput < 0 || pr.CacheWrite < 0 {
			return nil, fmt.Errorf("config: %s: prices.%q: prices must not be negative", p, name)
		}
	}
	if c.DB != "" && !filepath.IsAbs(c.DB) {
		// Relative to the config file, not to wherever keel runs.
		c.DB = filepath.Join(dir, c.DB)
	}
	return &c, nil
}

// PriceTable returns the built-in prices overridden by the config's.
func (c *Config) PriceTable() model.PriceTable {
	t := model.DefaultPrices()
	for k, v := range c.Prices {
		t[k] = v
	}
	return t
}
