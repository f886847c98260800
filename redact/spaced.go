package redact

import (
	"encoding/hex"
	"strings"
)

// ScanSpaced reports which values line holds once its blanks are taken
// out ([Secrets.Scan] of the joined text, of the text without the
// separators of spacers too, and of the bytes its runs of hex digits
// decode to, from either parity): the spellings that put a blank or a
// separator between a value's pieces, xxd's grouped hex ("736b 2d63 616e"),
// od -c ("s   k   -   c"), hexdump -C, escape Scan, which reads a
// value's pieces only when they are contiguous.
func (s *Secrets) ScanSpaced(line string) []Match {
	if s == nil || len(s.values) == 0 || !strings.ContainsAny(line, spacers) {
		return nil
	}
	joined := strings.Join(strings.Fields(line), "")
	if m := s.Scan(joined); len(m) > 0 {
		return m
	}
	if bare := strings.Map(func(r rune) rune {
		if strings.ContainsRune(spacers, r) {
			return -1
		}
		return r
	}, line); bare != joined {
		if m := s.Scan(bare); len(m) > 0 {
			return m
		}
	}
	for _, run := range hexRun().FindAllString(joined, -1) {
		for off := 0; off < 2 && off < len(run); off++ {
			r := run[off:]
			b, err := hex.DecodeString(r[:len(r)/2*2])
			if err != nil {
				continue
			}
			if m := s.Scan(string(b)); len(m) > 0 {
				return m
			}
		}
	}
	return nil
}

var hexRun = onceRegexp(`[0-9a-fA-F]{20,}`)

// spacers are what a program puts between a value's pieces to spell it
// out (sed 's/./&-/g', od -c, xxd): blanks, and the separators a value
// in a line is also tried without.
const spacers = " \t-:.,|_"

// hideSpaced replaces by [Mask] each line of text that holds a value only
// once its blanks are taken out ([Secrets.ScanSpaced]). Text whose blanks
// and line breaks taken out hold no value is returned at the cost of one
// scan.
func (s *Secrets) hideSpaced(text string) string {
	if len(s.values) == 0 || !strings.ContainsAny(text, spacers) || len(s.ScanSpaced(text)) == 0 {
		return text
	}
	lines := strings.SplitAfter(text, "\n")
	changed := false
	for i, l := range lines {
		if len(s.ScanSpaced(l)) == 0 {
			continue
		}
		nl := ""
		if strings.HasSuffix(l, "\n") {
			nl = "\n"
		}
		lines[i] = Mask + nl
		changed = true
	}
	if !changed {
		return text
	}
	return strings.Join(lines, "")
}
