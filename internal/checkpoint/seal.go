package checkpoint

import (
	"strings"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/redact"
)

// SealSecrets returns changes with every spelling of the secrets' values
// that [redact.Secrets.Seal] knows, in their paths and patches, replaced
// by a placeholder naming the secret («secret:NAME:FORM»): what a diff
// shows of a file a run wrote a secret into (docs/security.md, "A secret
// the model writes"). changes is not modified; with no secrets it is
// returned as is.
func SealSecrets(changes []Change, secrets []agent.Secret) []Change {
	if len(secrets) == 0 || len(changes) == 0 {
		return changes
	}
	names := make([]string, len(secrets))
	values := make([]string, len(secrets))
	for i, s := range secrets {
		names[i], values[i] = s.Name, s.Value
	}
	set := redact.NewSecrets(values...)
	seal := func(s string) string {
		if len(set.Scan(s)) == 0 {
			return s
		}
		return set.Seal(s, names)
	}
	out := make([]Change, len(changes))
	for i, c := range changes {
		c.Path = seal(c.Path)
		c.Patch = seal(sealSpaced(c.Patch, set, names))
		out[i] = c
	}
	return out
}

// sealSpaced replaces each line of patch that holds a secret only once
// its blanks are taken out (xxd's grouped hex "736b 2d63 616e", od -c's
// "s   k   -   c") by its first character and a placeholder naming the
// secret: such spellings escape the scanner, which reads a secret's
// pieces only when they are contiguous.
func sealSpaced(patch string, set *redact.Secrets, names []string) string {
	lines := strings.SplitAfter(patch, "\n")
	changed := false
	for i, l := range lines {
		if !strings.ContainsAny(l, " \t") {
			continue
		}
		m := set.ScanSpaced(l)
		if len(m) == 0 {
			continue
		}
		mark := l[:min(1, len(l))]
		nl := ""
		if strings.HasSuffix(l, "\n") {
			nl = "\n"
		}
		lines[i] = mark + "«secret:" + names[m[0].Value] + ":spaced» (line hidden)" + nl
		changed = true
	}
	if !changed {
		return patch
	}
	return strings.Join(lines, "")
}

// Seal returns s with the secrets' values sealed ([SealSecrets]) in its
// changes and in the names of the files it leaves out (Before, Outside,
// Later): a file a run named after a secret is named with the
// placeholder wherever a summary names it. s is not modified.
func (s *Summary) Seal(secrets []agent.Secret) *Summary {
	if len(secrets) == 0 {
		return s
	}
	out := *s
	out.Changes = SealSecrets(s.Changes, secrets)
	out.Before, out.Outside, out.Later = sealPaths(s.Before, secrets), sealPaths(s.Outside, secrets), sealPaths(s.Later, secrets)
	return &out
}

// sealPaths is paths with the secrets' values sealed.
func sealPaths(paths []string, secrets []agent.Secret) []string {
	if len(paths) == 0 {
		return paths
	}
	cs := make([]Change, len(paths))
	for i, p := range paths {
		cs[i].Path = p
	}
	out := make([]string, len(paths))
	for i, c := range SealSecrets(cs, secrets) {
		out[i] = c.Path
	}
	return out
}
