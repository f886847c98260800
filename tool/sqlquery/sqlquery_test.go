package sqlquery_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/keel-run/keel/internal/testenv"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/sqlquery"
)

// newDB returns a real PostgreSQL database with two tables and the tool.
func newDB(t *testing.T, o sqlquery.Options) (*tool.Registry, *tool.Env, string) {
	t.Helper()
	dsn := testenv.Postgres(t)
	ctx := context.Background()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	for _, q := range []string{
		`CREATE TABLE orders (id int PRIMARY KEY, customer text, total numeric)`,
		`INSERT INTO orders SELECT g, 'customer ' || g, g * 1.5 FROM generate_series(1, 2000) g`,
		`CREATE TABLE secrets (k text, v text)`,
		`INSERT INTO secrets VALUES ('api', 'sk-canary-123')`,
		`CREATE FUNCTION sneaky() RETURNS int LANGUAGE sql AS $$ DELETE FROM orders; SELECT 1 $$`,
	} {
		if _, err := c.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	o.Name, o.DSN = "shop", dsn
	db, err := sqlquery.Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	r := tool.NewRegistry()
	tl, h := db.Tool()
	r.Add(tl, h)
	ws, err := tool.NewWorkspace(t.TempDir(), "/workspace", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	return r, &tool.Env{Workspace: ws}, dsn
}

func run(t *testing.T, r *tool.Registry, env *tool.Env, args string) *tool.Result {
	t.Helper()
	a, bad := r.Validate(model.ToolCall{ID: "q", Name: "shop__sql_query", Arguments: args})
	if bad != nil {
		t.Fatalf("validate: %s", bad.Content)
	}
	res, err := r.Run(context.Background(), "shop__sql_query", &tool.Request{RunID: "r", CallID: "q", Arguments: a, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func count(t *testing.T, dsn string) int {
	t.Helper()
	c, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var n int
	c.QueryRow(context.Background(), "SELECT count(*) FROM orders").Scan(&n)
	return n
}

func TestReadOnlyByDefault(t *testing.T) {
	r, env, dsn := newDB(t, sqlquery.Options{MaxRows: 50})
	for _, tc := range []struct {
		name, sql string
		isErr     bool
		contains  string
	}{
		{"select", `SELECT id, customer FROM orders WHERE id <= 3 ORDER BY id`, false, "2\tcustomer 2"},
		{"row cap", `SELECT * FROM orders ORDER BY id`, false, "more than 50 rows"},
		{"insert", `INSERT INTO orders VALUES (9999, 'x', 1)`, true, "read-only"},
		{"delete in a CTE", `WITH d AS (DELETE FROM orders RETURNING id) SELECT count(*) FROM d`, true, "read-only"},
		{"writing function", `SELECT sneaky()`, true, "read-only"},
		{"two statements", `SELECT 1; DELETE FROM orders`, true, "one statement"},
		{"ddl", `DROP TABLE orders`, true, "read-only"},
		{"syntax", `SELEKT 1`, true, "syntax error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := run(t, r, env, mustJSON(map[string]any{"sql": tc.sql}))
			if res.IsError != tc.isErr || !strings.Contains(res.Content, tc.contains) {
				t.Errorf("%s:\n%+v", tc.sql, res)
			}
		})
	}
	if n := count(t, dsn); n != 2000 {
		t.Errorf("orders has %d rows after the read-only calls", n)
	}
}

func TestParamsTimeoutAndBytes(t *testing.T) {
	r, env, _ := newDB(t, sqlquery.Options{StatementTimeout: 300 * time.Millisecond, MaxBytes: 4000})
	res := run(t, r, env, `{"sql":"SELECT customer FROM orders WHERE id = $1","params":[7]}`)
	if res.IsError || !strings.Contains(res.Content, "customer 7") {
		t.Errorf("params: %+v", res)
	}
	res = run(t, r, env, `{"sql":"SELECT pg_sleep(5)"}`)
	if !res.IsError || !strings.Contains(res.Content, "longer than 300ms") {
		t.Errorf("timeout: %+v", res)
	}
	res = run(t, r, env, `{"sql":"SELECT repeat('x', 1000) FROM orders"}`)
	if res.IsError || !strings.Contains(res.Content, "passed 4000 bytes") {
		t.Errorf("bytes: %.500s", res.Content)
	}
}

func TestWritesWhenAllowed(t *testing.T) {
	r, env, dsn := newDB(t, sqlquery.Options{AllowWrites: true})
	res := run(t, r, env, `{"sql":"DELETE FROM orders WHERE id > 1000"}`)
	if res.IsError || !strings.Contains(res.Content, "DELETE 1000") {
		t.Fatalf("delete: %+v", res)
	}
	if n := count(t, dsn); n != 1000 {
		t.Errorf("%d rows left", n)
	}
}

// The policy sees the statement's kind and tables as PostgreSQL plans
// them, and can deny by table.
func TestPolicySeesKindAndTables(t *testing.T) {
	r, _, _ := newDB(t, sqlquery.Options{AllowWrites: true})
	eng, err := policy.Parse("sql.toml", []byte(`version = 1
cedar = '''
@id("all")
permit (principal, action, resource);

@id("no-secrets")
@reason("the secrets table is off limits")
forbid (principal, action, resource == Keel::Server::"shop")
when { context.facts has tables && context.facts.tables.contains("public.secrets") };

@id("ask-writes")
@ask
@reason("writes to the shop database need a person")
forbid (principal, action, resource == Keel::Server::"shop")
when { context.facts has writes && context.facts.writes };
'''
`))
	if err != nil {
		t.Fatal(err)
	}
	tl := r.Tool("shop__sql_query")
	for _, tc := range []struct {
		sql  string
		want policy.Effect
		kind string
	}{
		{`SELECT * FROM orders o JOIN secrets s ON true`, policy.Deny, "select"},
		{`SELECT v FROM (SELECT * FROM secrets) x`, policy.Deny, "select"},
		{`SELECT count(*) FROM orders`, policy.Allow, "select"},
		{`UPDATE orders SET total = 0 WHERE id = 1`, policy.Ask, "update"},
		{`WITH d AS (DELETE FROM orders RETURNING 1) SELECT * FROM d`, policy.Ask, "delete"},
		{`TRUNCATE orders`, policy.Ask, "other"},
	} {
		args := json.RawMessage(mustJSON(map[string]any{"sql": tc.sql}))
		facts := tl.Facts(args)
		d := eng.Decide(context.Background(), &policy.Call{Tool: tl.Name, Effect: tl.Effect.String(), Arguments: args, Server: tl.Server, Facts: facts, Sandbox: "linux"})
		if d.Effect != tc.want || facts["kind"] != tc.kind {
			t.Errorf("%s: %s (%s), facts %v", tc.sql, d.Effect, d.Reason, facts)
		}
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
