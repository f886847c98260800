package sqlquery_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/internal/testenv"
	"github.com/keel-run/keel/journal/sqlite"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/sqlquery"
)

// SQL as the end user, on a real PostgreSQL 15: an assistant agent's
// statements run with the connection string of the user it acts for,
// stored in the vault; row-level security then shows each user only
// their rows, the row cap still holds, a write still fails read-only, a
// missing credential is an auth.required wait, and the password is in
// no journal file.
func TestSQLAsEndUser(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.Postgres(t)
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	du, _ := url.Parse(dsn)
	db := strings.TrimPrefix(du.Path, "/")
	ann, bob := "ann_"+db, "bob_"+db // roles are per cluster
	for _, q := range []string{
		`CREATE TABLE orders (id int PRIMARY KEY, owner text, total int)`,
		fmt.Sprintf(`INSERT INTO orders SELECT g, CASE WHEN g %% 4 = 0 THEN '%s' ELSE '%s' END, g FROM generate_series(1, 800) g`, bob, ann),
		`ALTER TABLE orders ENABLE ROW LEVEL SECURITY`,
		`CREATE POLICY own ON orders USING (owner = current_user)`,
		fmt.Sprintf(`CREATE ROLE %s LOGIN`, ann), fmt.Sprintf(`CREATE ROLE %s LOGIN`, bob),
		fmt.Sprintf(`GRANT SELECT, DELETE ON orders TO %s, %s`, ann, bob),
	} {
		if _, err := c.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), dsn)
		if err == nil {
			c.Exec(context.Background(), fmt.Sprintf(`DROP OWNED BY %s, %s`, ann, bob))
			c.Close(context.Background())
		}
		// The roles go with the cluster; DROP ROLE needs the database gone.
	})
	userDSN := func(role string) string {
		u := *du
		u.User = url.UserPassword(role, "pw-canary-"+role)
		return u.String()
	}

	path := filepath.Join(t.TempDir(), "keel.db")
	store, err := sqlite.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	key, _ := credential.ParseKey(credential.GenerateKey())
	v, err := credential.New(store, &credential.Options{Keys: []*credential.Key{key}})
	if err != nil {
		t.Fatal(err)
	}
	ws, _ := tool.NewWorkspace(t.TempDir(), "/workspace", nil)
	defer ws.Close()
	env := &tool.Env{Workspace: ws}
	open := func(user string) *tool.Registry {
		d, err := sqlquery.Open(ctx, sqlquery.Options{Name: "shop", DSN: dsn, MaxRows: 50, UserDSN: sqlquery.VaultDSN(v, "shop", "helper", user)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		r := tool.NewRegistry()
		tl, h := d.Tool()
		r.Add(tl, h)
		return r
	}
	call := func(r *tool.Registry, user, id, args string) (*tool.Result, error) {
		t.Helper()
		a, bad := r.Validate(model.ToolCall{ID: id, Name: "shop__sql_query", Arguments: args})
		if bad != nil {
			t.Fatal(bad.Content)
		}
		req := &tool.Request{RunID: "run1", CallID: id, Arguments: a, Principal: "helper", OnBehalfOf: user, Env: env}
		if err := r.Tool("shop__sql_query").Authorize(ctx, req); err != nil {
			return nil, err
		}
		res, err := r.Run(ctx, "shop__sql_query", req)
		if err != nil {
			t.Fatal(err)
		}
		return res, nil
	}
	forAnn, forBob := open("ann"), open("bob")
	var ar *tool.AuthRequiredError
	if _, err := call(forAnn, "ann", "c1", `{"sql":"SELECT count(*) FROM orders"}`); !errors.As(err, &ar) || ar.Provider != "sql:shop" || ar.User != "ann" ||
		!strings.Contains(ar.Hint, "keel auth secret set sql:shop --agent helper --user ann") {
		t.Fatalf("without a stored credential: %v", err)
	}
	if _, err := v.PutSecret(ctx, "sql:shop", "helper", "ann", userDSN(ann), "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := v.PutSecret(ctx, "sql:shop", "helper", "bob", userDSN(bob), "test"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		r          *tool.Registry
		user, role string
		count      string
	}{{forAnn, "ann", ann, "600"}, {forBob, "bob", bob, "200"}} {
		res, err := call(tc.r, tc.user, "who", `{"sql":"SELECT current_user AS who, count(*) AS n FROM orders"}`)
		if err != nil || res.IsError || !strings.Contains(res.Content, tc.role+"\t"+tc.count) {
			t.Errorf("%s: %v %+v", tc.user, err, res)
		}
		// The row cap holds for the user's connection.
		res, _ = call(tc.r, tc.user, "all", `{"sql":"SELECT * FROM orders"}`)
		if !strings.Contains(res.Content, "more than 50 rows") || strings.Count(res.Content, "\n") > 60 {
			t.Errorf("%s: row cap: %.300s", tc.user, res.Content)
		}
		// Read-only as the user too (the user may DELETE; the agent not).
		res, _ = call(tc.r, tc.user, "del", `{"sql":"DELETE FROM orders"}`)
		if !res.IsError || !strings.Contains(res.Content, "read-only") {
			t.Errorf("%s: delete: %+v", tc.user, res)
		}
	}
	// A connection string for another database is refused.
	if _, err := v.PutSecret(ctx, "sql:shop", "helper", "eve", strings.Replace(userDSN(ann), "/"+db, "/postgres", 1), "test"); err != nil {
		t.Fatal(err)
	}
	res, _ := call(open("eve"), "eve", "x", `{"sql":"SELECT 1"}`)
	if !res.IsError || !strings.Contains(res.Content, "not the database") {
		t.Errorf("another database: %+v", res)
	}
	if n, _ := c.Exec(ctx, "SELECT 1 FROM orders"); n.RowsAffected() != 800 {
		t.Errorf("rows after the calls: %d", n.RowsAffected())
	}
	store.Close()
	for _, f := range []string{path, path + "-wal"} {
		b, _ := os.ReadFile(f)
		if strings.Contains(string(b), "pw-canary") {
			t.Errorf("a password is in %s", f)
		}
	}
}
