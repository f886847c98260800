// Package sqlquery is the sql_query connector: SQL against a PostgreSQL
// database (github.com/jackc/pgx/v5) as a governed tool NAME__sql_query.
//
// What the policy sees: before a call runs, PostgreSQL itself plans the
// statement (EXPLAIN, in a read-only transaction that is rolled back), and
// the plan gives the gate the statement's kind (select, insert, update,
// delete, merge, or other for statements PostgreSQL does not plan, such as
// DDL) and the tables it reads or writes, as context.facts (kind, tables,
// writes). A prefix check could be fooled (a CTE that deletes, a function
// that writes); the planner cannot.
//
// What runs: exactly one statement (the extended protocol refuses a second
// one), in a transaction that is READ ONLY unless the database allows
// writes (Options.AllowWrites) and the statement is a write the gate
// allowed; with a statement timeout (SET LOCAL statement_timeout); a
// SELECT is wrapped so that PostgreSQL stops after the row limit (plus
// one, to tell the model the result was cut); reading stops at the byte
// limit. The result is a bounded table (tab-separated, values escaped),
// the whole of it kept as an artifact like every tool result.
package sqlquery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/keel-run/keel/tool"
)

// ToolName is the suffix of the tool's name: NAME__sql_query.
const ToolName = "sql_query"

// Options configures one database.
type Options struct {
	// Name prefixes the tool (NAME__sql_query) and is the policy's
	// resource (Keel::Server::"NAME").
	Name string
	// DSN is the connection string (a URL or key=value pairs); a
	// password may also come from PGPASSWORD or ~/.pgpass, as with libpq.
	DSN string
	// AllowWrites lets statements that write run in a read-write
	// transaction when the gate allowed them; false (the default) runs
	// everything read-only, whatever the policy says.
	AllowWrites bool
	// StatementTimeout bounds one statement; 0 means 30 seconds.
	StatementTimeout time.Duration
	// MaxRows bounds the rows returned; 0 means 500. A call may ask for
	// fewer.
	MaxRows int
	// MaxBytes bounds the bytes of values read; 0 means 1 MiB.
	MaxBytes int
	// MaxCell bounds one value as shown; 0 means 2,000 bytes.
	MaxCell int
	// UserDSN, when set, gives the connection string of the end user an
	// assistant agent acts for (their own database credential, from the
	// vault): statements and their plans run on it, as that user, with
	// the same limits. It must name the same host, port and database as
	// DSN. run and call, when set, journal the use; an
	// [*tool.AuthRequiredError] means a person must store it first (the
	// call waits).
	UserDSN func(ctx context.Context, run, call string) (string, error)
}

// DB is a connected database. It is safe for concurrent use (one
// connection per call).
type DB struct {
	opts Options
	cfg  *pgx.ConnConfig

	mu   sync.Mutex
	pool []*pgx.Conn
}

// Open checks the options and the connection string and connects once to
// check that the database answers.
func Open(ctx context.Context, o Options) (*DB, error) {
	if o.StatementTimeout <= 0 {
		o.StatementTimeout = 30 * time.Second
	}
	if o.MaxRows <= 0 {
		o.MaxRows = 500
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = 1 << 20
	}
	if o.MaxCell <= 0 {
		o.MaxCell = 2000
	}
	cfg, err := pgx.ParseConfig(o.DSN)
	if err != nil {
		return nil, fmt.Errorf("sql database %s: %v", o.Name, redactErr(err))
	}
	cfg.RuntimeParams["application_name"] = "keel sql_query"
	d := &DB{opts: o, cfg: cfg}
	c, err := d.conn(ctx)
	if err != nil {
		return nil, err
	}
	d.put(c)
	return d, nil
}

// redactErr keeps a connection error free of the password.
func redactErr(err error) error {
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		return errors.New("cannot parse the connection string")
	}
	return err
}

func (d *DB) conn(ctx context.Context) (*pgx.Conn, error) {
	d.mu.Lock()
	if n := len(d.pool); n > 0 {
		c := d.pool[n-1]
		d.pool = d.pool[:n-1]
		d.mu.Unlock()
		if !c.IsClosed() {
			return c, nil
		}
	} else {
		d.mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	c, err := pgx.ConnectConfig(ctx, d.cfg)
	if err != nil {
		return nil, fmt.Errorf("sql database %s: connect to %s:%d/%s: %v", d.opts.Name, d.cfg.Host, d.cfg.Port, d.cfg.Database, redactErr(err))
	}
	return c, nil
}

func (d *DB) put(c *pgx.Conn) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.pool) < 4 && !c.IsClosed() {
		d.pool = append(d.pool, c)
		return
	}
	c.Close(context.Background())
}

// Close closes the connections.
func (d *DB) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.pool {
		c.Close(context.Background())
	}
	d.pool = nil
	return nil
}

type input struct {
	SQL     string `json:"sql"`
	Params  []any  `json:"params"`
	MaxRows int    `json:"max_rows"`
}

// Tool returns the tool's description and handler.
func (d *DB) Tool() (*tool.Tool, tool.Handler) {
	mode := "Statements run in a READ ONLY transaction: writes fail."
	if d.opts.AllowWrites {
		mode = "Reads run in a READ ONLY transaction; writes (INSERT, UPDATE, DELETE, MERGE) run when the policy allows them."
	}
	desc := fmt.Sprintf(`Run one SQL statement on the PostgreSQL database %s and return the result as a table (tab-separated, a header line first).
%s One statement per call (no ';'-separated scripts); use $1, $2... with params for values.
At most %d rows (max_rows for fewer) and %d bytes are returned; a statement is stopped after %s.`,
		d.opts.Name, mode, d.opts.MaxRows, d.opts.MaxBytes, d.opts.StatementTimeout)
	schema := fmt.Sprintf(`{
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "sql": {"type": "string", "minLength": 1, "maxLength": 100000, "description": "one SQL statement"},
    "params": {"type": "array", "maxItems": 100, "description": "values of $1, $2, ...", "items": {"type": ["string", "number", "boolean", "null"]}},
    "max_rows": {"type": "integer", "minimum": 1, "maximum": %d, "description": "at most this many rows"}
  },
  "required": ["sql"]
}`, d.opts.MaxRows)
	if d.opts.UserDSN != nil {
		desc += "\nStatements run as the user you act for, with their own database credential: you see what they may see."
	}
	t := &tool.Tool{
		Name:        d.opts.Name + "__" + ToolName,
		Description: desc,
		InputSchema: json.RawMessage(schema),
		Effect:      tool.External,
		Scope:       func(json.RawMessage) []string { return []string{} },
		Server:      d.opts.Name,
		Facts:       d.facts,
		Authorize:   d.authorize,
	}
	return t, d.handle
}

// authorize is the tool's Authorize hook: a user credential a person
// must store first makes the call wait.
func (d *DB) authorize(ctx context.Context, req *tool.Request) error {
	if d.opts.UserDSN == nil {
		return nil
	}
	_, err := d.opts.UserDSN(ctx, "", "")
	var ar *tool.AuthRequiredError
	if errors.As(err, &ar) {
		return ar
	}
	return nil
}

// userConn connects with the user's connection string (nil, nil without
// Options.UserDSN). It must name the database of Options.DSN.
func (d *DB) userConn(ctx context.Context, run, call string) (*pgx.Conn, error) {
	if d.opts.UserDSN == nil {
		return nil, nil
	}
	dsn, err := d.opts.UserDSN(ctx, run, call)
	if err != nil {
		return nil, fmt.Errorf("sql database %s: no credential of the user: %w", d.opts.Name, err)
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("sql database %s: the user's connection string: %v", d.opts.Name, redactErr(err))
	}
	if cfg.Host != d.cfg.Host || cfg.Port != d.cfg.Port || cfg.Database != d.cfg.Database {
		return nil, fmt.Errorf("sql database %s: the user's connection string names %s:%d/%s, not the database %s:%d/%s", d.opts.Name,
			cfg.Host, cfg.Port, cfg.Database, d.cfg.Host, d.cfg.Port, d.cfg.Database)
	}
	cfg.RuntimeParams["application_name"] = "keel sql_query"
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("sql database %s: connect as %s: %v", d.opts.Name, cfg.User, redactErr(err))
	}
	return c, nil
}

// Plan is what PostgreSQL's planner says about a statement.
type Plan struct {
	// Kind is select, insert, update, delete, merge, or other (a
	// statement EXPLAIN does not accept: DDL, COPY, SET, ...).
	Kind string
	// Tables are the relations the plan reads or writes, as
	// schema.table, sorted.
	Tables []string
	// Writes reports a statement that changes data (or one PostgreSQL
	// does not plan, which may).
	Writes bool
	// Error is the planner's error, when it refused the statement.
	Error string
}

// Explain plans sql (with params) in a read-only transaction that is
// rolled back, and reports its kind and tables.
func (d *DB) Explain(ctx context.Context, sql string, params []any) Plan {
	c, err := d.conn(ctx)
	if err != nil {
		return Plan{Kind: "unknown", Writes: true, Error: err.Error()}
	}
	defer d.put(c)
	return d.plan(ctx, c, sql, params)
}

// plan is Explain on the connection c.
func (d *DB) plan(ctx context.Context, c *pgx.Conn, sql string, params []any) Plan {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tx, err := c.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return Plan{Kind: "unknown", Writes: true, Error: err.Error()}
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = 5000"); err != nil {
		return Plan{Kind: "unknown", Writes: true, Error: err.Error()}
	}
	var raw []byte
	err = tx.QueryRow(ctx, "EXPLAIN (VERBOSE, FORMAT JSON) "+sql, params...).Scan(&raw)
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "42601" {
			// A syntax error right after EXPLAIN: not a plannable
			// statement (DDL, COPY, ...), or several statements.
			return Plan{Kind: "other", Writes: true, Error: pe.Message}
		}
		return Plan{Kind: "other", Writes: true, Error: errText(err)}
	}
	var plans []struct {
		Plan node `json:"Plan"`
	}
	if err := json.Unmarshal(raw, &plans); err != nil || len(plans) == 0 {
		return Plan{Kind: "unknown", Writes: true, Error: "unreadable plan"}
	}
	p := Plan{Kind: "select"}
	tables := map[string]bool{}
	plans[0].Plan.walk(func(n *node) {
		if n.NodeType == "ModifyTable" {
			p.Kind = strings.ToLower(n.Operation)
			p.Writes = true
		}
		if n.RelationName != "" {
			schema := n.Schema
			if schema == "" {
				schema = "public"
			}
			tables[schema+"."+n.RelationName] = true
		}
	})
	for t := range tables {
		p.Tables = append(p.Tables, t)
	}
	slices.Sort(p.Tables)
	return p
}

// node is a node of an EXPLAIN (FORMAT JSON) plan.
type node struct {
	NodeType     string `json:"Node Type"`
	Operation    string `json:"Operation"`
	RelationName string `json:"Relation Name"`
	Schema       string `json:"Schema"`
	Plans        []node `json:"Plans"`
}

func (n *node) walk(f func(*node)) {
	f(n)
	for i := range n.Plans {
		n.Plans[i].walk(f)
	}
}

// facts are what the gate shows the policy about a call.
func (d *DB) facts(args json.RawMessage) map[string]any {
	var in input
	if json.Unmarshal(args, &in) != nil {
		return map[string]any{"kind": "unknown", "writes": true}
	}
	var p Plan
	if uc, err := d.userConn(context.Background(), "", ""); err == nil && uc != nil {
		// Planned as the user: what they may see is what is planned.
		p = d.plan(context.Background(), uc, in.SQL, in.Params)
		uc.Close(context.Background())
	} else {
		p = d.Explain(context.Background(), in.SQL, in.Params)
	}
	f := map[string]any{"kind": p.Kind, "tables": p.Tables, "writes": p.Writes, "allow_writes": d.opts.AllowWrites}
	if p.Tables == nil {
		f["tables"] = []string{}
	}
	if p.Error != "" {
		f["plan_error"] = p.Error
	}
	return f
}

func errText(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		s := fmt.Sprintf("%s (SQLSTATE %s)", pe.Message, pe.Code)
		if pe.Detail != "" {
			s += ": " + pe.Detail
		}
		if pe.Hint != "" {
			s += "; hint: " + pe.Hint
		}
		return s
	}
	return err.Error()
}

func (d *DB) handle(ctx context.Context, req *tool.Request) (*tool.Result, error) {
	var in input
	if err := json.Unmarshal(req.Arguments, &in); err != nil {
		return tool.Errorf("invalid arguments for %s: %v", ToolName, err), nil
	}
	maxRows := d.opts.MaxRows
	if in.MaxRows > 0 && in.MaxRows < maxRows {
		maxRows = in.MaxRows
	}
	var c *pgx.Conn
	var err error
	perUser := d.opts.UserDSN != nil
	if perUser {
		c, err = d.userConn(ctx, req.RunID, req.CallID)
	} else {
		c, err = d.conn(ctx)
	}
	if err != nil {
		return tool.Errorf("%v", err), nil
	}
	plan := d.plan(ctx, c, in.SQL, in.Params)
	readOnly := !d.opts.AllowWrites || !plan.Writes
	broken := perUser // a user's connection is not kept
	defer func() {
		if broken {
			c.Close(context.Background())
			return
		}
		d.put(c)
	}()
	mode := pgx.ReadWrite
	if readOnly {
		mode = pgx.ReadOnly
	}
	tx, err := c.BeginTx(ctx, pgx.TxOptions{AccessMode: mode})
	if err != nil {
		broken = true
		return tool.Errorf("begin: %s", errText(err)), nil
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL statement_timeout = %d", d.opts.StatementTimeout.Milliseconds())); err != nil {
		return tool.Errorf("set the statement timeout: %s", errText(err)), nil
	}
	sql := strings.TrimRight(strings.TrimSpace(in.SQL), ";")
	if plan.Kind == "select" && plan.Error == "" {
		// Push the row limit into the query: PostgreSQL stops producing
		// rows after the limit (one more tells us it was cut).
		sql = fmt.Sprintf("SELECT * FROM (%s\n) AS keel_limited LIMIT %d", sql, maxRows+1)
	}
	rows, err := tx.Query(ctx, sql, in.Params...)
	if err != nil {
		return d.failed(err, readOnly, plan), nil
	}
	out := tool.NewOutput(req.Env.Workspace, req.RunID, req.CallID, req.Env.MaxResultChars)
	var names []string
	for _, f := range rows.FieldDescriptions() {
		names = append(names, f.Name)
	}
	if len(names) > 0 {
		fmt.Fprintln(out, strings.Join(names, "\t"))
	}
	n, size, cut := 0, 0, ""
	for rows.Next() {
		if n >= maxRows {
			cut = fmt.Sprintf("more than %d rows; only the first %d are shown (ask for fewer columns, filter, or aggregate)", maxRows, maxRows)
			break
		}
		vals, err := rows.Values()
		if err != nil {
			rows.Close()
			return tool.Errorf("read row %d: %s", n+1, errText(err)), nil
		}
		cells := make([]string, len(vals))
		for i, v := range vals {
			cells[i] = d.cell(v)
			size += len(cells[i])
		}
		fmt.Fprintln(out, strings.Join(cells, "\t"))
		n++
		if size > d.opts.MaxBytes {
			cut = fmt.Sprintf("the result passed %d bytes after %d rows; the rest is not shown", d.opts.MaxBytes, n)
			break
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil && cut == "" {
		return d.failed(err, readOnly, plan), nil
	}
	tag := rows.CommandTag()
	if err := tx.Commit(ctx); err != nil {
		return tool.Errorf("commit: %s", errText(err)), nil
	}
	switch {
	case cut != "":
		fmt.Fprintf(out, "(%s)\n", cut)
	case len(names) > 0:
		fmt.Fprintf(out, "(%d rows)\n", n)
	default:
		fmt.Fprintf(out, "%s\n", tag.String())
	}
	out.Close()
	return &tool.Result{Content: out.View(), Artifact: out.Artifact(), OutputBytes: out.Bytes()}, nil
}

func (d *DB) failed(err error, readOnly bool, plan Plan) *tool.Result {
	msg := errText(err)
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "25006":
			if d.opts.AllowWrites {
				msg += "; this statement ran read-only"
			} else {
				msg += fmt.Sprintf("; the database %s is read-only for this agent", d.opts.Name)
			}
		case "57014":
			msg = fmt.Sprintf("the statement ran longer than %s and was canceled", d.opts.StatementTimeout)
		case "42601":
			if strings.Contains(pe.Message, "multiple commands") {
				msg = "one statement per call: " + msg
			}
		}
	}
	return tool.Errorf("%s", msg)
}

// cell formats one value for the table: NULL, or text with tabs,
// newlines and control characters escaped, bounded.
func (d *DB) cell(v any) string {
	var s string
	switch x := v.(type) {
	case nil:
		return "NULL"
	case string:
		s = x
	case []byte:
		s = fmt.Sprintf("\\x%x", x)
	case time.Time:
		s = x.Format(time.RFC3339Nano)
	case fmt.Stringer:
		s = x.String()
	default:
		if b, err := json.Marshal(x); err == nil {
			s = string(b)
		} else {
			s = fmt.Sprint(x)
		}
	}
	s = strings.NewReplacer("\\", "\\\\", "\t", "\\t", "\n", "\\n", "\r", "\\r").Replace(s)
	if len(s) > d.opts.MaxCell {
		s = tool.Preview(s, d.opts.MaxCell)
	}
	return s
}
