package database_test

import (
	"context"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/migrations"
)

// downFloor is the oldest version the migrations go down to: every
// migration after it has a Down that undoes it whole.
const downFloor = 13

// The migrations after downFloor go down and up again: down, the schema is
// what it was before them, column for column, index for index (a Down that
// forgets an index or a trigger fails here); up again, it is what a new
// database gets.
func TestMigrationsGoDownAndUpAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPoolAt(t, downFloor)
	before := schema(t, pool)
	fresh := schema(t, pgtest.NewPool(t))

	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up: %v", err)
	}
	if up := schema(t, pool); !slices.Equal(up, fresh) {
		t.Fatalf("up from %d differs from a new database:\n%s", downFloor, diff(fresh, up))
	}
	// One migration at a time, each compared with a database migrated up
	// to the version it lands on: a later Down that drops what an earlier
	// one should have (00014's drops refuse, whatever 00016's did) must not
	// hide a wrong Down.
	for {
		res, err := p.Down(ctx)
		if err != nil {
			t.Fatalf("down: %v", err)
		}
		at, err := p.GetDBVersion(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := before
		if at != downFloor {
			want = schema(t, pgtest.NewPoolAt(t, at))
		}
		if down := schema(t, pool); !slices.Equal(down, want) {
			t.Fatalf("down from %d differs from the schema at %d:\n%s", res.Source.Version, at, diff(want, down))
		}
		if at == downFloor {
			break
		}
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
	if again := schema(t, pool); !slices.Equal(again, fresh) {
		t.Fatalf("up again differs from a new database:\n%s", diff(fresh, again))
	}
}

// schema describes the public schema, one sorted line per column, index,
// constraint, trigger, function and table option.
func schema(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT 'column ' || table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable
		       || ' ' || coalesce(column_default, '') || ' ' || is_identity
		FROM information_schema.columns WHERE table_schema = 'public' AND table_name <> 'goose_db_version'
		UNION ALL
		SELECT 'index ' || indexdef FROM pg_indexes WHERE schemaname = 'public' AND tablename <> 'goose_db_version'
		UNION ALL
		SELECT 'constraint ' || conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(oid)
		FROM pg_constraint WHERE connamespace = 'public'::regnamespace AND conrelid <> 'goose_db_version'::regclass
		UNION ALL
		SELECT 'trigger ' || pg_get_triggerdef(oid) FROM pg_trigger WHERE NOT tgisinternal
		UNION ALL
		SELECT 'function ' || oid::regprocedure::text || ' ' || md5(prosrc)
		       || CASE WHEN prosecdef THEN ' security definer' ELSE '' END
		       || coalesce(' ' || array_to_string(proconfig, ' '), '')
		FROM pg_proc WHERE pronamespace = 'public'::regnamespace
		UNION ALL
		SELECT 'options ' || relname || ' ' || array_to_string(reloptions, ',')
		FROM pg_class WHERE relnamespace = 'public'::regnamespace AND reloptions IS NOT NULL
		ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

// diff lists the lines only in want (-) and only in got (+).
func diff(want, got []string) string {
	var out string
	for _, l := range want {
		if !slices.Contains(got, l) {
			out += "- " + l + "\n"
		}
	}
	for _, l := range got {
		if !slices.Contains(want, l) {
			out += "+ " + l + "\n"
		}
	}
	return out
}
