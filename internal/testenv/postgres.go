package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

// PostgresEnv names the directory holding PostgreSQL's server programs
// (initdb, pg_ctl, psql). Without it, /usr/lib/postgresql/*/bin (Debian's
// layout, highest version first) and then PATH are searched.
const PostgresEnv = "KEEL_TEST_PG_BINDIR"

// pgCluster is the private PostgreSQL cluster of one test binary.
type pgCluster struct {
	bindir string
	port   int
	// stop closes the supervisor's stdin; the supervisor then stops the
	// server and removes its directory.
	stop *os.File
}

// tempRoot is the temporary directory of the process as it started:
// the one cluster of the test binary outlives the test that started it,
// and so must its directory (tests set TMPDIR to a directory of their
// own).
var tempRoot = os.TempDir()

var (
	pgOnce sync.Once
	pgC    *pgCluster
	pgErr  error
	pgDBs  atomic.Int64
)

// Postgres returns the DSN (postgres://keel@127.0.0.1:PORT/NAME) of a new,
// empty database that belongs to tb and is dropped when tb ends.
//
// The databases of one test binary live in one private cluster, created on
// first use: initdb into a fresh temporary directory (as the user postgres
// or nobody when the tests run as root, since initdb refuses root), with
// trust authentication for the user keel, listening on 127.0.0.1 on a free
// port and on a Unix socket in that directory only. A supervisor process
// stops the server and removes the directory when the test binary exits,
// however it exits (the end of its stdin tells it), so no cluster outlives
// its tests. The server programs are found as [PostgresEnv] says; when
// they are missing the test is skipped, or failed under CI.
func Postgres(tb testing.TB) string {
	tb.Helper()
	c := postgresCluster(tb)
	name := fmt.Sprintf("t%d_%d", os.Getpid(), pgDBs.Add(1))
	if err := c.psql("CREATE DATABASE " + name); err != nil {
		tb.Fatalf("testenv: create database: %v", err)
	}
	tb.Cleanup(func() {
		if err := c.psql("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)"); err != nil {
			tb.Errorf("testenv: drop database: %v", err)
		}
	})
	return c.dsn(name)
}

// PostgresBin returns the path of one of PostgreSQL's programs (for
// example pg_dump) from the directory [Postgres] uses, with the same
// skip-or-fail rule.
func PostgresBin(tb testing.TB, name string) string {
	tb.Helper()
	dir := postgresBindir(tb)
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		missing(tb, PostgresEnv, "%s: %v", name, err)
	}
	return p
}

func postgresCluster(tb testing.TB) *pgCluster {
	tb.Helper()
	bindir := postgresBindir(tb)
	pgOnce.Do(func() { pgC, pgErr = startPostgres(bindir) })
	if pgErr != nil {
		tb.Fatalf("testenv: start PostgreSQL: %v", pgErr)
	}
	return pgC
}

func postgresBindir(tb testing.TB) string {
	tb.Helper()
	if d := os.Getenv(PostgresEnv); d != "" {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err != nil {
			missing(tb, PostgresEnv, "%s=%s: %v", PostgresEnv, d, err)
		}
		return d
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgVersion(dirs[i]) > pgVersion(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p)
	}
	missing(tb, PostgresEnv, "%s is not set, and initdb is neither in /usr/lib/postgresql/*/bin nor on PATH", PostgresEnv)
	return ""
}

func pgVersion(bindir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(bindir)))
	return n
}

// supervisor runs as the cluster's owner. It creates and starts the
// cluster, says "ready PORT", waits for the end of stdin, then stops the
// server and removes the directory. Ports are tried until one binds.
// The cluster never outlives its tests and no test survives the
// machine's crash, so it does not fsync (as initdb --no-sync): on a
// loaded disk every commit waited for one.
const supervisor = `
set -u
dir=$1; bin=$2; shift 2
cleanup() { "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1; rm -rf "$dir"; }
trap cleanup EXIT
trap '' INT TERM QUIT HUP
"$bin/initdb" -D "$dir/data" -U keel --auth=trust --no-locale -E UTF8 --no-sync >"$dir/initdb.log" 2>&1 || { echo "initdb failed: $(tail -5 "$dir/initdb.log")"; exit 1; }
for port in "$@"; do
  if "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c max_connections=300 -c shared_buffers=32MB -c fsync=off -c synchronous_commit=off -c full_page_writes=off" start >/dev/null 2>&1; then
    echo "ready $port"
    cat >/dev/null
    exit 0
  fi
done
echo "pg_ctl start failed: $(tail -5 "$dir/server.log" 2>/dev/null)"
exit 1
`

func startPostgres(bindir string) (*pgCluster, error) {
	dir, err := os.MkdirTemp(tempRoot, "keel-pg-")
	if err != nil {
		return nil, err
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		uid, gid, err := unprivileged()
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	var ports []string
	for range 5 {
		p, err := freePort()
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		ports = append(ports, strconv.Itoa(p))
	}
	cmd := exec.Command("/bin/sh", append([]string{"-c", supervisor, "sh", dir, bindir}, ports...)...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	// A process group of its own: a Ctrl-C at the terminal reaches the
	// tests, and the supervisor cleans up once they are gone.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	stdin, w, err := os.Pipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	cmd.Stdin = stdin
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	stdin.Close()
	line, err := bufio.NewReader(out).ReadString('\n')
	line = strings.TrimSpace(line)
	// The supervisor is reaped if it ends early, and otherwise ends with
	// the test binary.
	go cmd.Wait()
	port, ok := strings.CutPrefix(line, "ready ")
	if !ok {
		w.Close()
		if line == "" && err != nil {
			return nil, fmt.Errorf("supervisor: %w", err)
		}
		return nil, errors.New(line)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("supervisor said %q", line)
	}
	return &pgCluster{bindir: bindir, port: n, stop: w}, nil
}

// unprivileged returns the user the cluster runs as when the tests run as
// root: postgres when it exists, else nobody.
func unprivileged() (uid, gid int, err error) {
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
		return uid, gid, nil
	}
	return 0, 0, errors.New("neither the user postgres nor nobody exists to own the cluster (initdb refuses root)")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (c *pgCluster) dsn(db string) string {
	return fmt.Sprintf("postgres://keel@127.0.0.1:%d/%s?sslmode=disable", c.port, db)
}

func (c *pgCluster) psql(sql string) error {
	cmd := exec.Command(filepath.Join(c.bindir, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1",
		"-h", "127.0.0.1", "-p", strconv.Itoa(c.port), "-U", "keel", "-d", "postgres", "-c", sql)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C", "PGCONNECT_TIMEOUT=30"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("psql -c %q: %v: %s", sql, err, strings.TrimSpace(string(out)))
	}
	return nil
}
