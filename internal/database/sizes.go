package database

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// TableSizeCollector exports, at scrape time, the size on disk of some
// tables (indexes and TOAST included: pg_total_relation_size) and the
// planner's estimate of their rows (pg_class.reltuples, kept by autovacuum
// and ANALYZE; left out until the table was first analyzed). Both are read
// from the catalog and the files' sizes, never by scanning the tables, so a
// scrape costs the same whatever their size. At a known write rate and
// retention the sizes level off: a table that keeps growing means its
// clean-up falls behind.
type TableSizeCollector struct {
	db     *pgxpool.Pool
	log    *slog.Logger
	tables []string

	bytes, rows *prometheus.Desc
}

// NewTableSizeCollector returns the collector of tables (names in the
// search path); register it on a registry. A table that does not exist is
// left out of the scrape.
func NewTableSizeCollector(db *pgxpool.Pool, log *slog.Logger, tables ...string) *TableSizeCollector {
	return &TableSizeCollector{
		db: db, log: log, tables: tables,
		bytes: prometheus.NewDesc("paymentsapi_table_size_bytes",
			"Size of a table on disk, indexes and TOAST included (pg_total_relation_size).", []string{"table"}, nil),
		rows: prometheus.NewDesc("paymentsapi_table_rows_estimate",
			"The planner's estimate of a table's rows (pg_class.reltuples), as of its last vacuum or analyze.", []string{"table"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *TableSizeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.bytes
	ch <- c.rows
}

// tableSize is one table's row of the scrape.
type tableSize struct {
	Table string
	Bytes int64
	Rows  float64
}

// Collect implements prometheus.Collector with one query on the catalog.
func (c *TableSizeCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rows, err := c.db.Query(ctx, `
		SELECT t.name, pg_total_relation_size(c.oid), c.reltuples::float8
		FROM unnest($1::text[]) AS t(name)
		JOIN pg_class c ON c.oid = to_regclass(t.name)`, c.tables)
	if err != nil {
		c.log.Warn("table size gauges unavailable", "error", err)
		return
	}
	sizes, err := pgx.CollectRows(rows, pgx.RowToStructByPos[tableSize])
	if err != nil {
		c.log.Warn("table size gauges unavailable", "error", err)
		return
	}
	for _, s := range sizes {
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(s.Bytes), s.Table)
		if s.Rows >= 0 { // -1: never vacuumed nor analyzed
			ch <- prometheus.MustNewConstMetric(c.rows, prometheus.GaugeValue, s.Rows, s.Table)
		}
	}
}
