package tui

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/visible"
)

// Skills prints keel skills list to w.
func Skills(w io.Writer, list []api.Skill, asJSON bool) error {
	if asJSON {
		return JSONLines(w, list)
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSOURCE\tDIGEST\tSIGNED\tSCRIPTS\tDESCRIPTION")
	for _, f := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\t%s\n", f.Name, f.Source, f.Digest[:min(19, len(f.Digest))], signedBy(f.Signed), f.Scripts, visible.String(FirstLine(f.Description, 60)))
	}
	return tw.Flush()
}

// signedBy says who signed a skill ("-": nobody).
func signedBy(s *api.SkillSignature) string {
	if s == nil {
		return "-"
	}
	return fmt.Sprintf("v%d by %s", s.Version, visible.String(s.Agent))
}

// Skill prints a skill as keel skills show does.
func Skill(w io.Writer, d *api.SkillDetail) {
	fmt.Fprintf(w, "%s\n  source:      %s", d.Name, d.Source)
	if d.URL != "" {
		fmt.Fprintf(w, " (%s)", visible.String(d.URL))
	}
	fmt.Fprintf(w, "\n  digest:      %s\n  signed:      %s", d.Digest, signedBy(d.Signed))
	if d.Signed != nil {
		fmt.Fprintf(w, ", approved by %s, signature verified", visible.String(d.Signed.ApprovedBy))
	}
	fmt.Fprintf(w, "\n  scripts:     %v", d.Scripts)
	if d.ScriptsAllowed {
		fmt.Fprint(w, " (allowed by a person)")
	}
	fmt.Fprintf(w, "\n  description: %s\n  files:\n", visible.String(d.Description))
	for _, f := range d.FileList {
		fmt.Fprintf(w, "    %s  %s\n", f.Digest, visible.String(f.Path))
	}
	fmt.Fprintln(w, "  instructions:")
	for _, l := range strings.Split(strings.TrimRight(d.Instructions, "\n"), "\n") {
		fmt.Fprintf(w, "  | %s\n", visible.String(l))
	}
}

// SkillCandidates prints keel skills candidates to w.
func SkillCandidates(w io.Writer, list []api.SkillCandidate, asJSON bool) error {
	if asJSON {
		return JSONLines(w, list)
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CANDIDATE\tSTATE\tFROM RUN\tTESTS\tEVIDENCE")
	for _, c := range list {
		ev := c.Evidence
		if c.ApprovedBy != "" {
			ev = fmt.Sprintf("v%d approved by %s; %s", c.Version, c.ApprovedBy, ev)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\n", c.Name+"@"+c.Digest[7:19], c.State, c.Run, c.TestsPassed, c.Tests, visible.String(ev))
	}
	return tw.Flush()
}
