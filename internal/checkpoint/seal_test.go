package checkpoint_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/checkpoint"
)

// A secret dumped with xxd or od -c (grouped hex, spaced characters)
// is sealed in a diff like its plain spelling.
func TestSealSpacedSpellings(t *testing.T) {
	secret := "sk-canary6-0123456789abcdef"
	env := []byte("HOME=/root\x00API_TOKEN=" + secret + "\x00PATH=/usr/bin\x00")
	for _, tool := range [][]string{{"xxd"}, {"od", "-c"}, {"hexdump", "-C"}} {
		if _, err := exec.LookPath(tool[0]); err != nil {
			t.Logf("%s not installed", tool[0])
			continue
		}
		cmd := exec.Command(tool[0], tool[1:]...)
		cmd.Stdin = strings.NewReader(string(env))
		dump, err := cmd.Output()
		if err != nil {
			t.Fatal(err)
		}
		c := checkpoint.FileDiff("e.txt", nil, dump)
		sealed := checkpoint.SealSecrets([]checkpoint.Change{c}, []agent.Secret{{Name: "API_TOKEN", Value: secret}})
		p := sealed[0].Patch
		for _, leak := range []string{"736b 2d63 616e", "6e61 7279", "3031 3233", "s   k   -   c", "0   1   2   3", "73 6b 2d 63 61 6e", "30 31 32 33"} {
			if strings.Contains(p, leak) {
				t.Errorf("%s: the sealed diff still holds %q:\n%s", tool[0], leak, p)
			}
		}
		if !strings.Contains(p, "«secret:API_TOKEN:") {
			t.Errorf("%s: no placeholder:\n%s", tool[0], p)
		}
	}
}
