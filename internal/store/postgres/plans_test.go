package postgres_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/internal/store/postgres"
	"github.com/kin-agents/kin/internal/store/sqlstore"
	"github.com/kin-agents/kin/kin"
)

// TestWalkPlansLookUpByKey: the plans PostgreSQL keeps for the walks over
// the agents (permission chain, ancestors, subtree, spend up the chain,
// agents by ids), made while the table holds a few agents as on a fresh
// database, fetch each row by its key: none reads the whole agents or
// agent_spend table. A plan that did (hashing the table, as the shared
// queries' joins were planned) was kept as the table grew, and every
// registration read every agent.
func TestWalkPlansLookUpByKey(t *testing.T) {
	ctx := context.Background()
	s, dsn := openNew(t)
	now := time.Now().UTC()
	var parent kin.AgentID
	for i := range 10 {
		err := s.Update(ctx, func(tx store.Tx) error {
			a := kin.Agent{Name: fmt.Sprintf("a%d", i), Parent: parent, Generation: i, Responsible: "plans@example.org",
				Life: kin.LifeOwned, Status: kin.StatusActive, State: kin.StateRegistered, CreatedAt: now, UpdatedAt: now, CreatedBy: "test"}
			got, err := tx.AgentInsert(ctx, store.AgentInsertParams{Agent: a})
			if err == nil {
				parent = got.ID
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The plan kept for every later run, as PostgreSQL makes it at a
	// statement's sixth run.
	if _, err := conn.ExecContext(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	args := map[string]string{
		"PermChain":       "(1)",
		"SpendAdd":        "(1, 1, 1.0)",
		"Ancestors":       "(1)",
		"Subtree":         "(1)",
		"AgentsByIDs":     "('[1, 2, 1]')",
		"LeanByIDs":       "('[1, 2, 1]')",
		"RowsByIDs":       "('[1, 2, 1]')",
		"ByParents":       "('[1, 2, 1]')",
		"PermChainSigned": "(1)",
		"PermChainCheck":  "(1, 'x')",
		"UpdateMany":      "('stopping', '[1, 2, 1]')",
	}
	walks := sqlstore.WalkQueries()
	if len(walks) != len(args) {
		t.Fatalf("%d walks, %d with arguments: give each walk its arguments", len(walks), len(args))
	}
	for name, q := range walks {
		stmt := "walk_" + strings.ToLower(name)
		if _, err := conn.ExecContext(ctx, "PREPARE "+stmt+" AS "+postgres.DialectSQL(q)); err != nil {
			t.Fatalf("%s: prepare: %v", name, err)
		}
		rows, err := conn.QueryContext(ctx, "EXPLAIN (COSTS OFF) EXECUTE "+stmt+args[name])
		if err != nil {
			t.Fatalf("%s: explain: %v", name, err)
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		rows.Close()
		text := strings.Join(plan, "\n")
		for _, table := range []string{"agents", "agent_spend"} {
			if strings.Contains(text, "Seq Scan on "+table+" ") || strings.HasSuffix(text, "Seq Scan on "+table) {
				t.Errorf("%s's kept plan reads the whole %s table:\n%s", name, table, text)
			}
		}
	}
}
