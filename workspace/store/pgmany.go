package store

// Postgres batches: one UPDATE per statement shape.
//
// A pipelined batch (batch.go) saves the round trips, but the server still
// plans, locks and executes each one-row UPDATE on its own, and converging
// 100,000 workspaces runs 800,000 of them. So the statements of a batch
// that share one text (a shape: every claim, every "executed", every
// observation) run as one statement:
//
//	UPDATE workspaces SET operation = gantry_v.p1::text, …
//	FROM unnest($1::text[], …, $n::text[], $n+1::int4[]) AS gantry_v(p1, …, pn, ord)
//	WHERE id = gantry_v.p3::text AND operation = 'NONE' AND … RETURNING gantry_v.ord
//
// Each row of the unnest carries one caller's arguments, so each row keeps
// its own WHERE (its compare-and-set), and RETURNING names the callers
// whose row was written: one row affected for them, none for the others,
// exactly as their own statement would have reported. A shape's rows in
// one statement are distinct (an UPDATE … FROM writes a row once): a
// second statement of the same row runs on its own after it, as if its
// caller had come a moment later. The arguments travel as text and are
// cast to the parameter types Postgres infers for the one-row statement
// (described once per shape).
//
// Row locks: a batch that rewrites first locks every workspace row it will
// write, in id order (SELECT … ORDER BY id FOR UPDATE), so two batches,
// of this replica or another, still take their rows in one order and
// cannot deadlock whatever order the shapes run in.

import (
	"context"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// lockRowsSQL locks a batch's workspace rows in the order the batches
// sort them (byte order, as Go compares strings).
const lockRowsSQL = `SELECT 1 FROM workspaces WHERE id = ANY($1::text[]) ORDER BY id COLLATE "C" FOR UPDATE`

// pgShape is a one-row statement's many-row spelling; sql "" = none (it
// runs one row per statement).
type pgShape struct {
	sql    string
	params int // the one-row statement's placeholders
}

// pgStmt is one statement of a rewritten pipeline: several requests of
// one shape (many) or one request on its own.
type pgStmt struct {
	reqs []int // indexes into the batch
	many bool
}

// manyRowPrefix is the only statement that is rewritten: a one-row update
// of a workspace (`… WHERE id = ? …`).
const manyRowPrefix = "UPDATE workspaces SET "

// writesWorkspace reports whether q writes a workspace row (the rows the
// lock statement takes).
func writesWorkspace(q string) bool {
	q = strings.TrimSpace(q)
	return strings.HasPrefix(q, manyRowPrefix) || strings.HasPrefix(q, "DELETE FROM workspaces ")
}

// shapeOf returns q's many-row spelling, described on pc the first time.
func (b *batcher) shapeOf(ctx context.Context, pc *pgx.Conn, q string) pgShape {
	if v, ok := b.pgShapes.Load(q); ok {
		return v.(pgShape)
	}
	var sh pgShape
	if rewritable(q) {
		sd, err := pc.Prepare(ctx, "", b.pgSQL(q))
		if err != nil {
			return sh // not remembered: the next batch describes it again
		}
		types := make([]string, len(sd.ParamOIDs))
		for i, oid := range sd.ParamOIDs {
			t, ok := pc.TypeMap().TypeForOID(oid)
			if !ok || !isIdent(t.Name) {
				types = nil
				break
			}
			types[i] = t.Name
		}
		if types != nil {
			sh = pgShape{sql: manyRowSQL(q, types), params: len(types)}
		}
	}
	b.pgShapes.Store(q, sh)
	return sh
}

// rewritable reports whether q has the one shape manyRowSQL rewrites:
// UPDATE workspaces SET … WHERE id = ? …, with one WHERE and no FROM or
// RETURNING of its own.
func rewritable(q string) bool {
	q = strings.TrimSpace(q)
	return strings.HasPrefix(q, manyRowPrefix) && strings.Count(q, "WHERE") == 1 &&
		strings.Contains(q, "WHERE id = ?") && !strings.Contains(q, "FROM") && !strings.Contains(q, "RETURNING")
}

func isIdent(s string) bool {
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return s != ""
}

// manyRowSQL spells q (rewritable, its i-th placeholder of type types[i])
// for many rows: see the file comment.
func manyRowSQL(q string, types []string) string {
	q = strings.TrimSpace(q)
	var body strings.Builder
	n, quoted := 0, false
	for _, c := range q {
		switch {
		case c == '\'':
			quoted = !quoted
		case c == '?' && !quoted:
			body.WriteString("gantry_v.p" + strconv.Itoa(n+1) + "::" + types[n])
			n++
			continue
		}
		body.WriteRune(c)
	}
	s := body.String()
	where := strings.Index(s, "WHERE")
	var from strings.Builder
	from.WriteString("FROM unnest(")
	for i := range types {
		from.WriteString("$" + strconv.Itoa(i+1) + "::text[], ")
	}
	from.WriteString("$" + strconv.Itoa(len(types)+1) + "::int4[]) AS gantry_v(")
	for i := range types {
		from.WriteString("p" + strconv.Itoa(i+1) + ", ")
	}
	from.WriteString("ord)\n\t")
	return s[:where] + from.String() + s[where:] + "\n\tRETURNING gantry_v.ord"
}

// textArg is v as the text Postgres casts to the parameter's type (nil:
// NULL); false for a type it does not know, whose statement then runs on
// its own.
func textArg(v any) (*string, bool) {
	var s string
	switch x := v.(type) {
	case nil:
		return nil, true
	case string:
		s = x
	case int:
		s = strconv.Itoa(x)
	case int64:
		s = strconv.FormatInt(x, 10)
	case int32:
		s = strconv.FormatInt(int64(x), 10)
	case bool:
		s = strconv.FormatBool(x)
	default:
		return nil, false
	}
	return &s, true
}

// textable reports whether args are params values textArg can spell.
func textable(args []any, params int) bool {
	if len(args) != params {
		return false
	}
	for _, v := range args {
		if _, ok := textArg(v); !ok {
			return false
		}
	}
	return true
}

// manyArgs is the unnest arguments of reqs (one shape with params
// placeholders): one text array per placeholder and the ordinals
// (planMany admitted only textable ones).
func manyArgs(reqs []*writeReq, params int) []any {
	cols := make([][]*string, params)
	ord := make([]int32, len(reqs))
	for c := range cols {
		cols[c] = make([]*string, len(reqs))
	}
	for i, r := range reqs {
		for c, v := range r.args {
			cols[c][i], _ = textArg(v)
		}
		ord[i] = int32(i)
	}
	args := make([]any, 0, params+1)
	for _, c := range cols {
		args = append(args, c)
	}
	return append(args, ord)
}

// planMany splits batch (sorted by key) into statements: for each shape
// with two or more requests, one many-row statement over the first request
// of each row, then every other request on its own, in batch order.
func planMany(batch []*writeReq, shape func(q string) pgShape) []pgStmt {
	var order []string
	groups := map[string][]int{}
	for i, r := range batch {
		if _, ok := groups[r.q]; !ok {
			order = append(order, r.q)
		}
		groups[r.q] = append(groups[r.q], i)
	}
	var out []pgStmt
	alone := make([]bool, len(batch))
	for i := range alone {
		alone[i] = true
	}
	for _, q := range order {
		idx := groups[q]
		if len(idx) < 2 {
			continue
		}
		sh := shape(q)
		if sh.sql == "" {
			continue
		}
		seen := make(map[string]bool, len(idx))
		var many []int
		for _, i := range idx {
			if !seen[batch[i].key] && textable(batch[i].args, sh.params) {
				seen[batch[i].key] = true
				many = append(many, i)
			}
		}
		if len(many) < 2 {
			continue
		}
		for _, i := range many {
			alone[i] = false
		}
		out = append(out, pgStmt{reqs: many, many: true})
	}
	for i, a := range alone {
		if a {
			out = append(out, pgStmt{reqs: []int{i}})
		}
	}
	return out
}

// lockKeys is the workspace rows batch writes, sorted, each once.
func lockKeys(batch []*writeReq) []string {
	var keys []string
	for _, r := range batch {
		if writesWorkspace(r.q) && (len(keys) == 0 || keys[len(keys)-1] != r.key) {
			keys = append(keys, r.key)
		}
	}
	return keys
}
