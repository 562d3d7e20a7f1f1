// Package stream reads the outbox in commit order through PostgreSQL's
// logical decoding: every event inserted into outbox_events, grouped by the
// transaction that committed it, in the order the transactions committed,
// from a logical replication slot (the pgoutput plugin and the publication
// paymentsapi_outbox, migration 00030).
//
// It is the read side of an insert-only outbox (the server's requirements:
// docs/operations.md, "The outbox relay"). Nothing is written per event to
// say it was read: the slot remembers how far its reader confirmed, and
// PostgreSQL sends again, after a reconnect, every transaction the reader
// did not confirm. Commit order is what a payment's events need: the
// transactions that write one aggregate's events are serialised by the
// aggregate's row lock, so they commit in the order of their events.
// (Transaction ids are not in commit order: package outbox/poll reads by
// them only below the oldest running transaction, which is why it can.)
//
// A slot has one reader at a time: PostgreSQL refuses a second one
// (ErrSlotBusy). The Relay, the service's only publisher of the outbox,
// lets one instance read at a time under an advisory lock.
//
// A slot lives on one server. After a failover to a standby, which has no
// slot (PostgreSQL 15 does not copy slots to standbys), Open creates it
// again and hands Options.Catchup a snapshot that sees exactly the
// transactions committed before the slot's first change: what the stream
// will not send. The caller publishes from it what may not have been
// published before (at least once).
//
// A transactional logical decoding message (Replay's) asks the relay to
// publish stored events again, at its place in commit order.
package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/paymentsapi/paymentsapi/internal/database"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
)

// Default names of the slot (the stem of SlotFor's) and of the
// publication (migration 00030).
const (
	DefaultSlot        = "paymentsapi_outbox"
	DefaultPublication = "paymentsapi_outbox"
)

// SlotFor is the slot a relay on database reads when none is configured:
// DefaultSlot, then the database's name. Slots belong to the whole server,
// so two databases of one server (two services, or the tests' databases)
// get two. A name that is not already lower-case letters, digits and
// underscores, or too long, is cut down to them and told apart by a hash
// of the whole.
func SlotFor(database string) string {
	name := DefaultSlot + "_" + database
	if slotName.MatchString(name) {
		return name
	}
	var b strings.Builder
	for _, r := range strings.ToLower(database) {
		if r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(database))
	suffix := fmt.Sprintf("_%08x", h.Sum32())
	stem := DefaultSlot + "_" + b.String()
	return stem[:min(len(stem), 63-len(suffix))] + suffix
}

// DefaultStatusInterval is how often a Stream tells the server how far it
// confirmed while it waits, asking for an answer (well inside PostgreSQL's
// wal_sender_timeout, 60 s by default). The answer says how far the server
// has read, and an idle stream confirms that far with its next status: its
// slot trails the server by one or two intervals.
const DefaultStatusInterval = time.Second

// ErrSlotBusy: another reader is streaming from the slot.
var ErrSlotBusy = errors.New("outbox stream: the replication slot is being read by another reader")

// Options configure Open. Zero fields take their defaults.
type Options struct {
	// Slot is the replication slot's name (lower-case letters, digits and
	// underscores). It is per database: two databases of one server need
	// two slots.
	Slot string
	// Publication is the publication the slot reads.
	Publication string
	// Catchup runs when Open created the slot, before the stream starts,
	// with the name of a snapshot to import (SET TRANSACTION SNAPSHOT, in
	// a REPEATABLE READ transaction on another connection) that sees
	// exactly the transactions committed before the stream's first one.
	// It must be done with the snapshot before it returns. What it returns
	// as then (if not nil) runs once the snapshot is let go (an exported
	// snapshot holds back the server's clean-up of old row versions, in
	// every database), still before the stream starts: the long part of a
	// catch-up, its publishing, belongs there. nil: nothing to catch up.
	Catchup func(ctx context.Context, snapshot string) (then func(ctx context.Context) error, err error)
	// StatusInterval is how often the stream reports its confirmed
	// position while it waits (default DefaultStatusInterval).
	StatusInterval time.Duration
	// SilenceLimit is how long the server may say nothing, though asked
	// to answer every status interval, before Next gives the stream up: a
	// frozen server, a partition (TCP alone would wait for many minutes).
	// The default is twice the server's wal_sender_timeout (60 s by
	// default), and none if that is 0: a server replaying a large
	// transaction (at its commit, whatever table it wrote) reads its
	// client only every wal_sender_timeout/2, and must not be taken for
	// gone meanwhile.
	SilenceLimit time.Duration
	// Exclusive makes Open take an advisory lock named after the slot on
	// the stream's own connection before it looks at the slot, and fail
	// with ErrSlotBusy if another Exclusive stream holds it. The lock lasts
	// exactly as long as the connection: closed, or lost, it is let go.
	// It keeps a second reader out while the first is not streaming yet
	// (Prepare, a catch-up), which the slot alone does not.
	Exclusive bool
	// Prepare runs once the lock is held (Exclusive) and before Open looks
	// at the slot; an error ends Open.
	Prepare func(ctx context.Context) error
	// IdleTimeout is the server's idle_session_timeout (and
	// idle_in_transaction_session_timeout) for the stream's connection
	// (default DefaultIdleTimeout): how long it waits for a
	// command before it ends the session, and with it the lock. It
	// applies only before the stream starts (Prepare, Catchup), so it
	// must exceed the longest Catchup choice; while Catchup's then runs,
	// Open keeps the session alive. A reader that froze there (its process
	// stopped, its host alive, so TCP never notices) lets go of the lock
	// after this long.
	IdleTimeout time.Duration
}

// DefaultIdleTimeout is Options.IdleTimeout's default; the relay bounds
// its catch-up's choice at 5 minutes.
const DefaultIdleTimeout = 10 * time.Minute

// lockClass is the first key of the Exclusive streams' advisory lock (the
// second is the slot's name, hashed): "outb".
const lockClass = 0x6f757462

// LSN is a position in the server's write-ahead log.
type LSN uint64

// String writes the LSN as PostgreSQL does (16/B374D848).
func (l LSN) String() string { return pglogrepl.LSN(l).String() }

// Tx is the outbox events of one committed transaction.
type Tx struct {
	// Events are in the order the transaction inserted them.
	Events []outbox.Event
	// Replays are the ids of events the transaction asked to publish again
	// (Replay), in its order.
	Replays []string
	// Committed is when the transaction committed, by the server's clock.
	Committed time.Time
	// End is the position to Confirm once the events are published.
	End LSN
}

// Stream reads a slot. It is not safe for concurrent use: one goroutine
// calls Next and Confirm.
type Stream struct {
	conn *pgconn.PgConn
	opts Options

	outbox    *relation // the outbox table, once the server described it
	cur       *Tx       // the transaction being received, between its Begin and Commit
	handed    LSN       // End of the last Tx that Next returned
	confirmed LSN       // what the server was, or is about to be, told
	lastSent  time.Time // when the server was last told
	heard     time.Time // when the server last sent anything
	read      LSN       // how far the server said it had read (its keepalives)
	err       error     // what broke the stream: every later call returns it
	asked     bool      // AskPosition asked, and the server has not answered yet
}

// relation is where an outbox row's columns are in a decoded tuple.
type relation struct {
	id                                            uint32
	idCol, aggTypeCol, aggIDCol, typeCol, payload int
	createdCol, traceCol                          int
}

var slotName = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// Open connects to connString as a replication client, creates the slot if
// it does not exist (running opts.Catchup), and starts streaming from
// where the slot's last reader confirmed. It returns ErrSlotBusy (wrapped)
// if another reader holds the slot.
func Open(ctx context.Context, connString string, opts Options) (*Stream, error) {
	if opts.Slot == "" {
		opts.Slot = DefaultSlot
	}
	if opts.Publication == "" {
		opts.Publication = DefaultPublication
	}
	if opts.StatusInterval <= 0 {
		opts.StatusInterval = DefaultStatusInterval
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	for _, name := range []string{opts.Slot, opts.Publication} {
		if !slotName.MatchString(name) {
			return nil, fmt.Errorf("outbox stream: %q is not a valid slot or publication name (lower-case letters, digits, _)", name)
		}
	}
	cfg, err := pgconn.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("outbox stream: %w", err)
	}
	// A DATABASE_URL may carry pgxpool's settings (pool_max_conns, ...),
	// which pgconn would send the server as parameters it does not know.
	for k := range cfg.RuntimeParams {
		if strings.HasPrefix(k, "pool_") {
			delete(cfg.RuntimeParams, k)
		}
	}
	cfg.RuntimeParams["replication"] = "database"
	// Idle before the stream starts: in a transaction while a created
	// slot's snapshot is exported (Catchup), out of one otherwise.
	idle := strconv.FormatInt(opts.IdleTimeout.Milliseconds(), 10)
	cfg.RuntimeParams["idle_session_timeout"] = idle
	cfg.RuntimeParams["idle_in_transaction_session_timeout"] = idle
	database.ConfigureConn(cfg) // the service's connect timeout per host, keepalives
	// Timestamps come as text: read them in one zone and one style.
	cfg.RuntimeParams["TimeZone"] = "UTC"
	cfg.RuntimeParams["DateStyle"] = "ISO, MDY"
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("outbox stream: connect: %w", err)
	}
	s := &Stream{conn: conn, opts: opts}
	if s.opts.SilenceLimit <= 0 {
		if err := s.silenceFromServer(ctx); err != nil {
			_ = conn.Close(context.WithoutCancel(ctx))
			return nil, err
		}
	}
	if err := s.prepare(ctx); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	if err := s.start(ctx); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return s, nil
}

// silenceFromServer sets the silence limit from the server's
// wal_sender_timeout (see Options.SilenceLimit): twice it, or none (0).
func (s *Stream) silenceFromServer(ctx context.Context) error {
	res, err := s.conn.Exec(ctx, `SELECT setting FROM pg_settings WHERE name = 'wal_sender_timeout'`).ReadAll()
	if err != nil {
		return fmt.Errorf("outbox stream: read wal_sender_timeout: %w", err)
	}
	if len(res) != 1 || len(res[0].Rows) != 1 {
		return errors.New("outbox stream: read wal_sender_timeout: no answer")
	}
	ms, err := strconv.ParseInt(string(res[0].Rows[0][0]), 10, 64)
	if err != nil {
		return fmt.Errorf("outbox stream: read wal_sender_timeout: %w", err)
	}
	s.opts.SilenceLimit = 2 * time.Duration(ms) * time.Millisecond // 0: none
	return nil
}

// prepare takes the lock (Exclusive) and runs Prepare.
func (s *Stream) prepare(ctx context.Context) error {
	if s.opts.Exclusive {
		// A walsender of a database runs SQL (simple protocol only);
		// the slot's name was checked, so it can be written in.
		res, err := s.conn.Exec(ctx, fmt.Sprintf(`SELECT pg_try_advisory_lock(%d, hashtext('%s'))`, lockClass, s.opts.Slot)).ReadAll()
		if err != nil {
			return fmt.Errorf("outbox stream: take the lock of slot %s: %w", s.opts.Slot, err)
		}
		if len(res) != 1 || len(res[0].Rows) != 1 || string(res[0].Rows[0][0]) != "t" {
			return fmt.Errorf("%w (another relay holds its lock)", ErrSlotBusy)
		}
	}
	if s.opts.Prepare != nil {
		return s.opts.Prepare(ctx)
	}
	return nil
}

func (s *Stream) start(ctx context.Context) error {
	res, err := s.conn.Exec(ctx, `SELECT 1 FROM pg_replication_slots WHERE slot_name = '`+s.opts.Slot+`'`).ReadAll()
	if err != nil {
		return fmt.Errorf("outbox stream: look up slot %s: %w", s.opts.Slot, err)
	}
	if len(res) == 0 || len(res[0].Rows) == 0 {
		if err := s.create(ctx); err != nil {
			return err
		}
	}
	err = pglogrepl.StartReplication(ctx, s.conn, s.opts.Slot, 0, pglogrepl.StartReplicationOptions{
		Mode: pglogrepl.LogicalReplication,
		// messages: the transactional messages of Replay come in their
		// transaction.
		PluginArgs: []string{"proto_version '1'", "publication_names '" + s.opts.Publication + "'", "messages 'true'"},
	})
	if err != nil {
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == "55006" { // object_in_use
			return fmt.Errorf("%w: %s", ErrSlotBusy, pgErr.Message)
		}
		return fmt.Errorf("outbox stream: start streaming from slot %s: %w", s.opts.Slot, err)
	}
	s.lastSent, s.heard = time.Now(), time.Now()
	return nil
}

// create creates the slot, exporting the snapshot of its consistent point
// for Catchup. Another instance creating it at the same moment wins: the
// stream then starts on its slot (and is probably told it is busy).
func (s *Stream) create(ctx context.Context) error {
	action := "NOEXPORT_SNAPSHOT"
	if s.opts.Catchup != nil {
		action = "EXPORT_SNAPSHOT"
	}
	created, err := pglogrepl.CreateReplicationSlot(ctx, s.conn, s.opts.Slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: action})
	if err != nil {
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == "42710" { // duplicate_object
			return nil
		}
		return fmt.Errorf("outbox stream: create slot %s: %w", s.opts.Slot, err)
	}
	if s.opts.Catchup == nil {
		return nil
	}
	// The snapshot lives until this connection's next command.
	then, err := s.opts.Catchup(ctx, created.SnapshotName)
	if err != nil {
		return fmt.Errorf("outbox stream: catch up before slot %s: %w", s.opts.Slot, err)
	}
	if then == nil {
		return nil
	}
	if _, err := pglogrepl.IdentifySystem(ctx, s.conn); err != nil { // a command: the snapshot goes
		return fmt.Errorf("outbox stream: let go of the catch-up's snapshot: %w", err)
	}
	return s.keptAlive(ctx, func(ctx context.Context) error {
		if err := then(ctx); err != nil {
			return fmt.Errorf("outbox stream: catch up before slot %s: %w", s.opts.Slot, err)
		}
		return nil
	})
}

// keptAlive runs f (which does not use the stream's connection) while a
// command every quarter of IdleTimeout keeps the server from ending the
// idle session. A failed command fails keptAlive once f is done: the
// session, and its lock, are gone.
func (s *Stream) keptAlive(ctx context.Context, f func(context.Context) error) error {
	stop := make(chan struct{})
	lost := make(chan error, 1)
	go func() {
		t := time.NewTicker(s.opts.IdleTimeout / 4)
		defer t.Stop()
		for {
			select {
			case <-stop:
				lost <- nil
				return
			case <-t.C:
				if _, err := pglogrepl.IdentifySystem(ctx, s.conn); err != nil {
					lost <- fmt.Errorf("outbox stream: the session was lost during the catch-up: %w", err)
					<-stop
					return
				}
			}
		}
	}()
	err := f(ctx)
	close(stop)
	if ping := <-lost; err == nil {
		err = ping
	}
	return err
}

// Next returns the next committed transaction that inserted outbox events
// or asked for replays (or, after AskPosition, an empty one once the
// server answered). It waits for one until ctx ends, telling the server
// meanwhile how far the stream confirmed. A transaction that did neither
// is not returned.
func (s *Stream) Next(ctx context.Context) (tx Tx, err error) {
	if s.err != nil {
		return Tx{}, s.err
	}
	defer func() {
		// Anything but a wait that ran out leaves the stream unusable: a
		// transaction half received must not be finished later without
		// what broke it.
		if err != nil && !(ctx.Err() != nil && pgconn.Timeout(err)) {
			s.err, s.cur = err, nil
		}
	}()
	for {
		if time.Since(s.lastSent) >= s.opts.StatusInterval {
			// Asking for an answer: a server that sends nothing for
			// SilenceLimit is taken for gone.
			if err := s.sendStatusAsking(true); err != nil {
				return Tx{}, err
			}
		}
		// Wait until the next status is due, or less if ctx says so (a
		// batch's linger: most calls under load, which then need no
		// context of their own).
		wait, cancel := ctx, context.CancelFunc(nil)
		if due := s.lastSent.Add(s.opts.StatusInterval); !deadlineBefore(ctx, due) {
			wait, cancel = context.WithDeadline(ctx, due)
		}
		msg, err := s.conn.ReceiveMessage(wait)
		if cancel != nil {
			cancel()
		}
		if err != nil {
			if ctx.Err() == nil && pgconn.Timeout(err) {
				if silent := time.Since(s.heard); s.opts.SilenceLimit > 0 && silent > s.opts.SilenceLimit {
					return Tx{}, fmt.Errorf("outbox stream: the server sent nothing for %s, though asked to answer", silent.Round(time.Second))
				}
				continue // time to tell the server where we are
			}
			return Tx{}, fmt.Errorf("outbox stream: receive: %w", err)
		}
		s.heard = time.Now()
		switch msg := msg.(type) {
		case *pgproto3.CopyData:
			tx, done, err := s.handle(msg.Data)
			if err != nil {
				return Tx{}, err
			}
			if done {
				return tx, nil
			}
		case *pgproto3.ErrorResponse:
			return Tx{}, fmt.Errorf("outbox stream: %w", pgconn.ErrorResponseToPgError(msg))
		}
	}
}

// deadlineBefore reports whether ctx has a deadline no later than t.
func deadlineBefore(ctx context.Context, t time.Time) bool {
	d, ok := ctx.Deadline()
	return ok && !d.After(t)
}

// handle reads one message of the stream; done when it completed a
// transaction with events. The message's bytes are the connection's buffer:
// whatever is kept is copied.
func (s *Stream) handle(data []byte) (Tx, bool, error) {
	if len(data) == 0 {
		return Tx{}, false, nil
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		k, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return Tx{}, false, fmt.Errorf("outbox stream: %w", err)
		}
		// Idle: every transaction handed out was confirmed and none is
		// being received, so everything the server sent so far is done
		// with, and the slot may let go of the WAL before it (changes
		// to other tables, transactions without events).
		s.read = max(s.read, LSN(k.ServerWALEnd))
		if s.cur == nil && s.confirmed >= s.handed && LSN(k.ServerWALEnd) > s.confirmed {
			s.confirmed = LSN(k.ServerWALEnd) // told with the next status
		}
		if k.ReplyRequested {
			if err := s.sendStatus(); err != nil {
				return Tx{}, false, err
			}
		}
		if s.asked { // the answer: Next returns, with no events
			s.asked = false
			return Tx{}, true, nil
		}
		return Tx{}, false, nil
	case pglogrepl.XLogDataByteID:
	default:
		return Tx{}, false, nil
	}
	x, err := pglogrepl.ParseXLogData(data[1:])
	if err != nil {
		return Tx{}, false, fmt.Errorf("outbox stream: %w", err)
	}
	m, err := pglogrepl.Parse(x.WALData)
	if err != nil {
		return Tx{}, false, fmt.Errorf("outbox stream: decode: %w", err)
	}
	switch m := m.(type) {
	case *pglogrepl.RelationMessage:
		if m.RelationName == "outbox_events" {
			r, err := newRelation(m)
			if err != nil {
				return Tx{}, false, err
			}
			s.outbox = r
		}
	case *pglogrepl.BeginMessage:
		s.cur = &Tx{Committed: m.CommitTime.UTC()}
	case *pglogrepl.InsertMessage:
		if s.cur == nil || s.outbox == nil || m.RelationID != s.outbox.id {
			// The publication holds the outbox alone, described before
			// its first row: anything else is a stream this reader does
			// not understand, and skipping it could skip an event.
			return Tx{}, false, fmt.Errorf("outbox stream: an insert into relation %d outside a transaction or before its description", m.RelationID)
		}
		e, err := s.outbox.event(m.Tuple)
		if err != nil {
			return Tx{}, false, err
		}
		s.cur.Events = append(s.cur.Events, e)
	case *pglogrepl.LogicalDecodingMessage:
		// Replay's, in a transaction; any other (RunOnce's position
		// marks, other programs' messages) is not the outbox's.
		if m.Transactional && m.Prefix == replayPrefix && s.cur != nil {
			s.cur.Replays = append(s.cur.Replays, string(m.Content))
		}
	case *pglogrepl.CommitMessage:
		if s.cur == nil {
			return Tx{}, false, nil
		}
		tx := *s.cur
		s.cur = nil
		tx.End = LSN(m.TransactionEndLSN)
		if len(tx.Events) == 0 && len(tx.Replays) == 0 {
			if s.confirmed >= s.handed {
				s.confirmed = max(s.confirmed, tx.End)
			}
			return Tx{}, false, nil
		}
		s.handed = tx.End
		return tx, true, nil
	}
	return Tx{}, false, nil
}

// Confirm tells the server that every transaction up to end (a Tx's End)
// is done with: a reconnected stream starts after it, and the server may
// recycle the WAL before it. Transactions are confirmed in the order Next
// returned them.
func (s *Stream) Confirm(end LSN) error {
	if end <= s.confirmed {
		return nil
	}
	s.confirmed = end
	return s.sendStatus()
}

// Drained reports whether everything committed before target (a WAL
// position read from the server, pg_current_wal_insert_lsn) has come through
// the stream and was confirmed. It only knows how far the server read from
// its keepalives: AskPosition asks for one.
func (s *Stream) Drained(target LSN) bool {
	return s.cur == nil && s.confirmed >= s.handed && s.read >= target
}

// AskPosition asks the server to say how far it has read. Next returns a
// Tx without events when it answered (or earlier, with a transaction that
// came first).
func (s *Stream) AskPosition() error {
	s.asked = true
	return s.sendStatusAsking(true)
}

func (s *Stream) sendStatus() error { return s.sendStatusAsking(false) }

func (s *Stream) sendStatusAsking(reply bool) error {
	err := pglogrepl.SendStandbyStatusUpdate(context.Background(), s.conn,
		pglogrepl.StandbyStatusUpdate{WALWritePosition: pglogrepl.LSN(s.confirmed), ReplyRequested: reply})
	if err != nil {
		return fmt.Errorf("outbox stream: report position %s: %w", s.confirmed, err)
	}
	s.lastSent = time.Now()
	return nil
}

// Close ends the stream; what was not confirmed is sent again to the next
// reader.
func (s *Stream) Close(ctx context.Context) error { return s.conn.Close(ctx) }

func newRelation(m *pglogrepl.RelationMessage) (*relation, error) {
	r := &relation{id: m.RelationID, traceCol: -1}
	cols := map[string]*int{
		"id": &r.idCol, "aggregate_type": &r.aggTypeCol, "aggregate_id": &r.aggIDCol,
		"event_type": &r.typeCol, "payload": &r.payload, "created_at": &r.createdCol, "traceparent": &r.traceCol,
	}
	for _, p := range cols {
		*p = -1
	}
	for i, c := range m.Columns {
		if p, ok := cols[c.Name]; ok {
			*p = i
		}
	}
	for name, p := range cols {
		if *p < 0 && name != "traceparent" {
			return nil, fmt.Errorf("outbox stream: the server's outbox_events has no column %s", name)
		}
	}
	return r, nil
}

// pgTimestamp is how a timestamptz is written as text in UTC with DateStyle
// ISO.
const pgTimestamp = "2006-01-02 15:04:05.999999999Z07"

// event decodes an inserted outbox row (text format).
func (r *relation) event(t *pglogrepl.TupleData) (outbox.Event, error) {
	text := func(i int) (string, bool) {
		if i < 0 || i >= len(t.Columns) || t.Columns[i].DataType != pglogrepl.TupleDataTypeText {
			return "", false
		}
		return string(t.Columns[i].Data), true
	}
	var e outbox.Event
	var ok [6]bool
	e.ID, ok[0] = text(r.idCol)
	e.AggregateType, ok[1] = text(r.aggTypeCol)
	e.AggregateID, ok[2] = text(r.aggIDCol)
	e.Type, ok[3] = text(r.typeCol)
	payload, okPayload := text(r.payload)
	created, okCreated := text(r.createdCol)
	ok[4], ok[5] = okPayload, okCreated
	for _, o := range ok {
		if !o {
			return outbox.Event{}, fmt.Errorf("outbox stream: an outbox row came without one of its required columns")
		}
	}
	e.Payload = json.RawMessage(payload) // a copy of the connection's buffer
	at, err := time.Parse(pgTimestamp, created)
	if err != nil {
		return outbox.Event{}, fmt.Errorf("outbox stream: event %s: created_at: %w", e.ID, err)
	}
	e.OccurredAt = at.UTC()
	e.TraceParent, _ = text(r.traceCol)
	return e, nil
}

// ErrServerCannotStream: the database cannot be read through logical
// decoding, or not by this role.
var ErrServerCannotStream = errors.New("outbox stream: the database cannot be read through logical decoding")

// CheckServer says whether the relay can read db's server: wal_level must
// be logical and the role must be allowed to replicate (REPLICATION, a
// superuser, or on Amazon RDS a member of rds_replication). The error (wrapping ErrServerCannotStream) says what to
// change.
func CheckServer(ctx context.Context, db outbox.DB) error {
	var (
		level string
		may   bool
	)
	// REPLICATION, a superuser, or (Amazon RDS, where roles have no
	// REPLICATION attribute) a member of rds_replication.
	err := db.QueryRow(ctx, `
		SELECT current_setting('wal_level'),
		       (SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user)
		       OR EXISTS (SELECT FROM pg_roles WHERE rolname = 'rds_replication' AND pg_has_role(current_user, oid, 'MEMBER'))`).Scan(&level, &may)
	if err != nil {
		return fmt.Errorf("outbox stream: check the server: %w", err)
	}
	switch {
	case level != "logical":
		return fmt.Errorf("%w: the server runs with wal_level=%s; set wal_level = logical (postgresql.conf, or -c wal_level=logical) and restart it",
			ErrServerCannotStream, level)
	case !may:
		return fmt.Errorf("%w: the role may not replicate; run ALTER ROLE ... REPLICATION (as a superuser) for the service's role",
			ErrServerCannotStream)
	}
	return nil
}
