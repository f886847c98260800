package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/keel-run/keel/redact"
)

// createsJournal are the commands that add something new to a journal (a
// run, a server, imported runs, an agent, a token), and so create the
// journal when it is missing, saying so: a first `keel run --db team.db`
// or `keel agents create --db team.db ci-bot` is how a journal comes to
// be. Every other command reads or changes what a journal already holds,
// and a missing one is refused unless --create-db is given: a mistyped
// --db would otherwise show "no runs" from a new, empty file beside the
// real one, and leave that file behind.
var createsJournal = map[string]bool{
	"keel run": true, "keel chat": true, "keel demo": true, "keel serve": true, "keel runs import": true,
	"keel agents create": true, "keel tokens create": true, "keel mcp serve": true,
}

// checkJournalPath decides what to do when the journal p (a plain path,
// not a DSN) does not exist: the default path (the first use of Keel),
// --create-db and the commands of createsJournal create it and say so;
// the config file's db is treated like --db; anything else is a usage
// error.
// It returns whether p must be created.
func (a *app) checkJournalPath(p string) (create bool, err error) {
	from := a.journalFrom()
	if redact.KeywordDSN(p) {
		// Never a file of that name (its password in a file name), never
		// the password in a message.
		return false, usagef("%s %q is a key=value connection string, which Keel does not open: give the journal as postgres://USER@HOST:PORT/DB (the password in PGPASSWORD or ~/.pgpass) or as a file path", from, redact.DSN(p))
	}
	if err := a.journalNotDir(p); err != nil {
		return false, err
	}
	_, err = os.Stat(p)
	switch {
	case err == nil:
		return false, nil
	case !errors.Is(err, fs.ErrNotExist):
		return false, fmt.Errorf("journal %s: %w", p, err)
	case a.db == "" && (a.cfg == nil || a.cfg.DB == ""), a.createDB || createsJournal[a.cmdPath]:
		// The default journal: the first use of Keel creates it, saying
		// where (a mistyped KEEL_HOME shows here).
		fmt.Fprintf(a.stderr, "keel: %s did not exist: created a new journal there\n", p)
		return true, nil
	}
	hint := ""
	if dir := filepath.Dir(p); dir != "" {
		if m, _ := filepath.Glob(filepath.Join(dir, "*.db")); len(m) > 0 {
			hint = " (journals in " + dir + ": " + strings.Join(baseNames(m, 5), ", ") + ")"
		}
	}
	return false, usagef("no journal at %s%s: check %s, or pass --create-db to start a new one there", p, hint, from)
}

func baseNames(paths []string, max int) []string {
	var out []string
	for i, p := range paths {
		if i == max {
			out = append(out, "…")
			break
		}
		out = append(out, filepath.Base(p))
	}
	return out
}

// journalFrom names where the journal's path came from, for messages.
func (a *app) journalFrom() string {
	if a.db == "" {
		return "db in " + filepath.Join(a.home, "config.toml")
	}
	return "--db"
}

// journalNotDir refuses a journal path p (a plain path, not a DSN) that
// is a directory. Commands that set up a workspace check it first, so a
// refused command leaves nothing there.
func (a *app) journalNotDir(p string) error {
	if strings.Contains(p, ":") {
		return nil
	}
	if fi, err := os.Stat(p); err == nil && fi.IsDir() {
		return usagef("the journal %s is a directory: %s must name the journal's file (for example %s)", p, a.journalFrom(), filepath.Join(p, "keel.db"))
	}
	return nil
}
