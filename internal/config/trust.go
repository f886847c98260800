package config

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// TrustFile is the file of Keel's home directory home that lists the
// files the person trusts as they are (project files, agent
// definitions, skill lockfiles), one "SHA256 PATH" a line.
func TrustFile(home string) string { return filepath.Join(home, "trusted-projects") }

// Trusted reports whether the person trusts the file path with content
// (keel config trust, or a command the person ran that wrote it).
func Trusted(home, path string, content []byte) bool {
	t, err := os.ReadFile(TrustFile(home))
	return err == nil && slices.Contains(strings.Split(string(t), "\n"), trustLine(path, content))
}

// Trust records content of the file path as trusted.
func Trust(home, path string, content []byte) error {
	if Trusted(home, path, content) {
		return nil
	}
	if err := os.MkdirAll(home, 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(TrustFile(home), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintln(f, trustLine(path, content)); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func trustLine(path string, content []byte) string {
	return fmt.Sprintf("%x %s", sha256.Sum256(content), path)
}
