package idempotency

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/paymentsapi/paymentsapi/internal/claim"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/metrics"
	"github.com/paymentsapi/paymentsapi/internal/tracing"
)

// Result is what one run of an operation came to: a domain value (a
// resource such as an order or a booking) that its Operation renders as an
// answer.
type Result interface {
	// Outcome names the result in metrics and logs, from a small fixed set
	// of the operation's (succeeded, failed, processing, ...).
	Outcome() string
}

// Operation is what an idempotent operation plugs into the engine: its name
// (part of every key's scope), how an owner of one of its keys takes the
// key's resource from its recorded state to a result, and how a result is
// answered. Resume serves the request that claimed the key, a retry that
// took it over from a dead owner, and the reconciler alike; it writes only
// through the Owner (fenced) and ends by finishing (a final answer) or
// releasing the key.
//
// Render turns a result into the answer a client gets. The engine renders
// a final result once, when the final state change is committed, and stores
// those bytes in the same transaction; a retry gets the stored bytes, never
// a fresh rendering. So an answer is replayed byte for byte even after the
// rendering changes in a later version.
type Operation interface {
	Name() string
	Resume(ctx context.Context, own *Owner) (Result, error)
	Render(Result) (Response, error)
}

// Disclosing is what an Operation also implements whose first answer must
// show what no stored answer may hold: a secret it drew for its resource
// (a webhook endpoint's signing secret). Render makes the answer stored
// and replayed; RenderFirst makes the one the request whose owner stored
// it gets, instead, once. So the secret reaches its client and never the
// table of answers.
type Disclosing interface {
	RenderFirst(Result) (Response, error)
}

// Renamed is what an Operation whose scope is being renamed also
// implements: the other names its keys may be stored under (by the release
// before the rename or the one after it), read as its own. Its keys are
// still written under Name. The rename's migration adds a unique index
// over (tenant, key) across the names, so that a key claimed under one
// name is never claimed again under another: a claim that meets it answers
// it as a retry (docs/operations.md, "Migrations").
type Renamed interface {
	Aliases() []string
}

// names are the names op's keys may be stored under: its Name first.
func names(op Operation) []string {
	n := []string{op.Name()}
	if r, ok := op.(Renamed); ok {
		n = append(n, r.Aliases()...)
	}
	return n
}

// Waiter tells a request when a key changes, on any instance (Listener).
type Waiter interface {
	Subscribe(keyID int64) (<-chan struct{}, func())
}

// Config holds the engine's timing rules.
type Config struct {
	// ReplayTTL is how long a final answer is replayed (IDEMPOTENCY_TTL).
	ReplayTTL time.Duration
	// Lease is how long an owner holds a key before it counts as dead
	// (LEASE_DURATION).
	Lease time.Duration
	// RetryAfter is the one advice the service gives a client that should
	// come back later: a 409 in use, a 202 processing, a 503.
	RetryAfter time.Duration
	// OutsideCall is the longest one call of an owner outside the service
	// may take (PROVIDER_TIMEOUT): an owner renews its lease before each
	// step that calls out, so an owner at work is heard from about that
	// often (inUseBy). 0: owners make no such call.
	OutsideCall time.Duration
	// CommitMode is how claims and owner steps are committed
	// (COMMIT_MODE): CommitInline, each on its own, or CommitGroup ("":
	// the default), grouped with concurrent requests' (see committer).
	CommitMode string
	// CommitConcurrency is, in CommitGroup, how many claims, and how many
	// owner steps, are in flight at once before the others of their kind
	// are grouped (COMMIT_CONCURRENCY; 0: 1 of each).
	CommitConcurrency int
}

// Deps are the engine's collaborators.
type Deps struct {
	DB      *pgxpool.Pool
	Clock   clock.Clock
	Log     *slog.Logger
	Metrics *metrics.Metrics
	// Waiter lets duplicates wait for the original (Prefer: wait). Nil:
	// duplicates never wait.
	Waiter Waiter
	// Tracer makes each key the reconciler resolves a span, which the
	// operation's outside calls, statements and events continue; nil (or a
	// no-op provider) traces nothing.
	Tracer trace.TracerProvider
	// Answers caches final answers for retries (see Answers); nil: none,
	// every retry reads its key's record.
	Answers Answers
}

// Engine runs the idempotency protocol for any Operation: claim, decide
// (replay, in use, reused, expired, take over), wait, take over with a new
// fencing token, and answer a request whose write was fenced out from what
// the key now says.
type Engine struct {
	db      *pgxpool.Pool
	clock   clock.Clock
	log     *slog.Logger
	metrics *metrics.Metrics
	waiter  Waiter
	tracer  trace.Tracer // nil: tracing is off
	cfg     Config
	// commits runs the claims and the owners' steps: each on its own, or
	// grouped with those of concurrent requests (see committer).
	commits committer
	answers Answers // nil: no cache of answers
}

// NewEngine returns an Engine. A CommitMode other than CommitInline,
// CommitGroup or "" is a programming error (the configuration refuses
// it): NewEngine panics.
func NewEngine(d Deps, cfg Config) *Engine {
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = time.Second
	}
	if cfg.CommitConcurrency <= 0 {
		cfg.CommitConcurrency = 1
	}
	commits, err := newCommitter(cfg.CommitMode, d.DB, d.Metrics, cfg.CommitConcurrency)
	if err != nil {
		panic("idempotency: " + err.Error())
	}
	return &Engine{db: d.DB, clock: d.Clock, log: d.Log, metrics: d.Metrics, waiter: d.Waiter, tracer: tracing.Tracer(d.Tracer), cfg: cfg, commits: commits, answers: d.Answers}
}

// RetryAfter is the engine's advice to come back later.
func (e *Engine) RetryAfter() time.Duration { return e.cfg.RetryAfter }

// MaxWait bounds how long a duplicate may wait for its original.
const MaxWait = 10 * time.Second

// Request is one call of an operation under a key.
type Request struct {
	Scope       Scope
	Fingerprint []byte // the one definition of "the same command", from the operation
	// Resource is what a first request creates, its id chosen up front.
	Resource Resource
	// Create queues the statements that write the resource and whatever
	// must exist exactly when it does (its first event), in the claim's
	// transaction: all or nothing with the claim. So a statement that must
	// refuse (a rule of the operation broken) does it in the database, with
	// package refuse: its error undoes the claim and is returned by Do for
	// the operation to translate. The inline committer runs them only once
	// the claim took the key; the group committer sends them in the claim's
	// batch, where, for a retry, they write and raise nothing: each is a
	// claim.Statement, with a plain form and one that tests the claim's
	// condition (see package claim). httpapi's TestRetriesWriteNothing
	// counts every table's rows.
	Create func(b *claim.Batch)
	// Created is the resource as Create writes it, handed to the first
	// owner (Owner.Created) so that Resume need not read it back.
	Created Result
	// Wait is how long a duplicate may wait for an in-flight original
	// (Prefer: wait), at most MaxWait.
	Wait time.Duration
	// FirstLook is the look the claim books, should nobody finish the key
	// (an owner's hold or release books the next one): LookAt(t) or
	// LookBy(t), at t, once the claim's lease has run out; LookSoon, as
	// soon as it has (the claim's batch began a step whose outcome only a
	// look can tell); the zero Look or LookNever, none until an owner
	// books one.
	FirstLook Look
	// Exists, if set, reports whether Resource is stored already (in
	// Scope's tenant). It is asked only when the database refused the
	// claim: a resource whose id is derived (ResourceID) exists then when
	// its key's record was deleted by clean-up, and the key is answered as
	// expired (KeyExpiredError) instead of with the database's error.
	Exists func(ctx context.Context) (bool, error)
}

// Reply is the answer to a request: what to send, whether it is a replay of
// a stored answer, and the resource it is about.
type Reply struct {
	Response Response
	Replayed bool
	Resource Resource
	// ComeBack, for an answer that is not final, is how long nothing more
	// can be known: the look its owner booked is that far off. 0: the
	// engine's RetryAfter.
	ComeBack time.Duration
}

// Do runs op for req. The first request claims the key and creates the
// resource in one transaction, then resumes it; a retry is answered from
// what the key's record says, and takes the key over if its owner died.
func (e *Engine) Do(ctx context.Context, op Operation, req Request) (Reply, error) {
	// The names op's keys may be stored under, read once for every
	// statement of this request (Renamed).
	scope := names(op)
	if reply, ok := e.cachedReplay(req); ok {
		return reply, nil
	}
	if reply, answered, err := e.answerIfLikelyTaken(ctx, op, req, scope); answered {
		return reply, err
	}
	order := lockOrder(req.Scope)
	// A second round is needed only when the world moved between two
	// statements: clean-up deleted the key we collided with.
	for round := 0; ; round++ {
		id, claimed, err := e.claim(ctx, req, order)
		if err != nil {
			if expired := existingResource(ctx, req, err); expired != nil {
				e.metrics.IdempotencyConflicts.WithLabelValues("expired").Inc()
				e.log.InfoContext(ctx, "idempotency key's record deleted but its resource exists: answered as expired",
					"resource", req.Resource.ID)
				return Reply{}, expired
			}
			return Reply{}, err
		}
		if claimed {
			e.metrics.IdempotencyClaims.Inc()
			e.log.DebugContext(ctx, "idempotency key claimed", "resource", req.Resource.ID)
			own := e.newOwner(id, 1, req.Scope, order, req.Resource)
			own.First, own.Created = true, req.Created
			return e.resume(ctx, op, own)
		}
		reply, err := e.answerRetry(ctx, op, req, scope, nil)
		if errors.Is(err, ErrNotFound) && round == 0 {
			continue
		}
		return reply, err
	}
}

// RefuseNew returns refusal (an operation's refusal of its command as it
// stands: what the provider would refuse) only when scope's key is new. A
// key already recorded is answered by Do from its record (its replay, a
// 409, a 422), whatever the refusal says now: the answer it remembers was
// given under the rules of its day, and a retry must get it. The record is
// read only when there is a refusal, so a request that passes costs
// nothing more.
func (e *Engine) RefuseNew(ctx context.Context, op Operation, scope Scope, refusal error) error {
	if refusal == nil {
		return nil
	}
	rec, err := e.look(ctx, scope, names(op))
	if err != nil {
		return err
	}
	if rec != nil {
		return nil
	}
	return refusal
}

// answerIfLikelyTaken answers req as a retry, from its key's record read
// first and alone, if the committer saw the key taken lately (the group
// committer's hints; never the inline one's): answered is false when it
// did not, or when the record is not there after all, and the request
// claims its key as any other.
func (e *Engine) answerIfLikelyTaken(ctx context.Context, op Operation, req Request, scope []string) (reply Reply, answered bool, err error) {
	if !e.commits.likelyTaken(req.Scope) {
		return Reply{}, false, nil
	}
	seen, err := e.look(ctx, req.Scope, scope)
	if err != nil || seen == nil {
		return Reply{}, err != nil, err
	}
	reply, err = e.answerRetry(ctx, op, req, scope, seen)
	if errors.Is(err, ErrNotFound) {
		return Reply{}, false, nil
	}
	return reply, true, err
}

// claim is the first transaction: the key and whatever req.Create writes,
// all or nothing. claimed is false, without error, when the key was
// already claimed; the caller then reads the key's record, as a retry.
func (e *Engine) claim(ctx context.Context, req Request, order uint64) (id int64, claimed bool, err error) {
	// The client going away must not cut the transaction off halfway: once
	// its commit is sent, the claim may have committed, and a cut
	// connection would leave it in doubt. It is bounded like any owner step
	// instead.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stepTimeout)
	defer cancel()
	now := e.clock.Now()
	k := newKey{scope: req.Scope, fingerprint: req.Fingerprint, resource: req.Resource,
		createdAt: now, leaseUntil: now.Add(e.cfg.Lease), firstLook: req.FirstLook.claimAt(now)}
	if id, err = e.commits.claim(ctx, order, k, req.Create); err != nil {
		return 0, false, fmt.Errorf("claim idempotency key: %w", err)
	}
	return id, id != 0, nil
}

// lockOrder is where a claim of scope, and each step of its owner, goes in
// a group commit's order: a hash of the scope that every instance computes
// alike (FNV-1a, no seed), so that two instances' groups take the locks of
// the same keys in one order.
func lockOrder(s Scope) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s.Tenant))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(s.Operation))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(s.Key))
	return h.Sum64()
}

// look reads scope's record, stored under any of names; nil if there is
// none. It is bounded as the claim is.
func (e *Engine) look(ctx context.Context, scope Scope, names []string) (*Record, error) {
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	rec, err := load(ctx, e.db, scope, names)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read idempotency key: %w", err)
	}
	return &rec, nil
}

// QueueScheduled adds to b, an owner's batch (committed with the owner's
// writes, or not at all), the claim of req's key by the service itself: a
// command the service issues to itself, to run at `at` (the expiry of
// something its resource holds). Nobody holds the key (its lease runs out at once)
// and the reconciler first looks at it at `at`: it takes the key over and
// resumes its resource as a recovering owner, as it would a dead client's
// key. req.Create's statements follow the claim, claim.Statements as a
// request's are, so a key already claimed makes it all a no-op. Its key is
// a ServiceKey, which no client can send.
func (e *Engine) QueueScheduled(b *pgx.Batch, req Request, at time.Time) {
	if !IsServiceKey(req.Scope.Key) {
		panic(fmt.Sprintf("idempotency: the service's own command needs a ServiceKey, not %q", req.Scope.Key))
	}
	now := e.clock.Now()
	queueGatingClaim(b, newKey{scope: req.Scope, fingerprint: req.Fingerprint, resource: req.Resource,
		createdAt: now, leaseUntil: now, firstLook: &at}, nil)
	if req.Create != nil {
		req.Create(claim.After(b))
	}
	// What the owner's batch queues after this is not a claim's.
	b.Queue(claim.Reset())
}

// QueueWake adds to b the end of the manual review of every key of the
// tenant's operation that is left for a person with the reason `because`
// (Owner.MarkForReview's) and still has no final answer: the reconciler
// looks at each again from at, as at a key its owner released. It is for
// keys left for a person only because they waited on another that b now
// ends (whoever ended that one: a person, or its own client's retry), so
// `because` names what they waited on; a key in review for any other
// reason, or finished, is left as it is. It reads only keys in review or
// unfinished (through a partial index of either), however many keys the
// tenant has (TestQueueWakeReadsOnlyTheKeysInReview): an operation queues
// it with each end of a resource others may wait on.
func (e *Engine) QueueWake(b *pgx.Batch, tenant, operation, because string, at time.Time) {
	b.Queue(wakeSQL, tenant, operation, because, at)
}

// wakeSQL is QueueWake's statement.
const wakeSQL = `
		UPDATE idempotency_keys SET manual_review_at = NULL, recovery_next_at = $4
		WHERE manual_review_at IS NOT NULL AND tenant_id = $1 AND operation = $2
		  AND recovery_last_error = $3 AND response_status IS NULL`

// answerRetry answers a request whose key was already claimed, from seen
// (the key's record, just read) if it has it. While the original
// is in flight it waits, up to req.Wait, for a notification that the key
// changed, then answers as a retry would.
func (e *Engine) answerRetry(ctx context.Context, op Operation, req Request, scope []string, seen *Record) (reply Reply, err error) {
	var (
		waitCtx context.Context // nil: do not wait
		changed <-chan struct{}
		lost    int // takeover races lost
	)
	if wait := min(req.Wait, MaxWait); wait > 0 && e.waiter != nil {
		var cancel context.CancelFunc
		waitCtx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	for {
		var rec Record
		if seen != nil {
			rec, seen = *seen, nil
		} else {
			// Bounded like every step: a frozen primary answers a 503 within
			// stepTimeout, and the client's retry finds the new one.
			lctx, cancel := context.WithTimeout(ctx, stepTimeout)
			var err error
			rec, err = load(lctx, e.db, req.Scope, scope)
			cancel()
			if err != nil {
				return Reply{}, err // ErrNotFound: deleted by clean-up meanwhile; Do claims again
			}
		}
		now := e.clock.Now()
		switch rec.Decide(req.Fingerprint, now, e.cfg.ReplayTTL) {
		case DecideMismatch:
			e.metrics.IdempotencyConflicts.WithLabelValues("mismatch").Inc()
			return Reply{}, ErrKeyReused
		case DecideExpired:
			e.metrics.IdempotencyConflicts.WithLabelValues("expired").Inc()
			return Reply{}, &KeyExpiredError{Resource: rec.Resource}
		case DecideReplay:
			e.metrics.IdempotencyReplays.Inc()
			if e.answers != nil {
				e.answers.Keep(req.Scope, rec)
			}
			return rec.replay(), nil
		case DecideInFlight:
			if waitCtx == nil || waitCtx.Err() != nil {
				return Reply{}, e.inUseBy(rec, now)
			}
			if changed == nil {
				// Subscribe, then look again: a change between the load
				// and the subscription is not missed.
				// The key counts its waiters: its owner notifies only
				// when someone waits (a notifying commit is serialised
				// cluster-wide, so an uncontended key must not notify).
				var unsubscribe func()
				changed, unsubscribe = e.waiter.Subscribe(rec.ID)
				defer unsubscribe()
				if err := addWaiter(ctx, e.db, rec.ID, 1); err != nil {
					return Reply{}, err
				}
				defer func() {
					if reply.Replayed {
						// A stored answer: the key is finished, and a
						// finished key never notifies again. Uncounting
						// would only be one more commit on a row that a
						// storm of retries is queueing for.
						return
					}
					if err := addWaiter(context.WithoutCancel(ctx), e.db, rec.ID, -1); err != nil {
						e.log.WarnContext(ctx, "could not uncount a waiter; its key may notify once too often", "error", err)
					}
				}()
				continue
			}
			// Wake on a notification, or when the owner's lease runs out
			// (a dead owner gives none): then a takeover is due.
			leaseLeft := time.NewTimer(max(rec.LeaseExpiresAt.Sub(now), 0) + 10*time.Millisecond)
			woken := "notified"
			select {
			case <-changed:
			case <-leaseLeft.C:
				woken = "lease_expired"
			case <-waitCtx.Done():
				woken = "timeout"
			}
			leaseLeft.Stop()
			e.metrics.IdempotencyWaits.WithLabelValues(woken).Inc()
		case DecideTakeOver:
			own, ok, err := e.takeOverKey(ctx, rec, now)
			if err != nil {
				return Reply{}, err
			}
			if !ok {
				// Someone else moved first and now owns a live lease, or
				// finished: look again. Losing more than a few races in a
				// row means the key is contended: answer 409.
				if lost++; lost > 3 {
					return Reply{}, e.inUse()
				}
				continue
			}
			e.log.InfoContext(ctx, "idempotency key taken over", "resource", rec.Resource.ID, "fencing_token", own.Token)
			return e.resume(ctx, op, own)
		}
	}
}

// takenOver is the owner of rec's key, which the caller has just taken
// over with the fencing token rec now holds: a retry or ResolveNow
// (takeOverKey), or the reconciler (claimDue). Every takeover becomes its
// owner here, and is counted here, once.
func (e *Engine) takenOver(rec Record) *Owner {
	e.metrics.IdempotencyTakeovers.Inc()
	return e.newOwner(rec.ID, rec.FencingToken, rec.Scope, lockOrder(rec.Scope), rec.Resource)
}

// newOwner is the owner of key row id with fencing token, of scope (whose
// lockOrder is order), for res.
func (e *Engine) newOwner(id, token int64, scope Scope, order uint64, res Resource) *Owner {
	return &Owner{e: e, KeyID: id, Token: token, Tenant: scope.Tenant, Resource: res, operation: scope.Operation, order: order}
}

// takeOverKey takes rec's key over at now from an owner whose lease ran
// out (or that let go), with the next fencing token; ok is false, without
// error, when someone moved first.
func (e *Engine) takeOverKey(ctx context.Context, rec Record, now time.Time) (own *Owner, ok bool, err error) {
	token, ok, err := TakeOver(ctx, e.db, rec.ID, rec.FencingToken, now, e.cfg.Lease)
	if err != nil || !ok {
		return nil, false, err
	}
	rec.FencingToken = token
	return e.takenOver(rec), true, nil
}

func (e *Engine) inUse() error {
	e.metrics.IdempotencyConflicts.WithLabelValues("in_flight").Inc()
	return &KeyInUseError{RetryAfter: e.cfg.RetryAfter}
}

// inUseBy is inUse for a key whose owner holds rec's lease at now, with
// advice that follows what the owner's silence says of it.
//
// An owner shows it is alive only by writing its lease: the claim, a
// takeover, and a renewal before each step that calls outside the service
// (Owner.QueueHold) each set it to a whole Lease from then, so the time
// since it last did is Lease less what is left. Between two renewals an
// owner at work makes one outside call (at most OutsideCall) and commits
// what it brought back, which, on a database that answers, takes far less
// than RetryAfter. So:
//
//   - an owner heard from within OutsideCall and RetryAfter is presumed at
//     work and done soon: the advice is the engine's RetryAfter;
//   - one silent for longer is presumed dead, and only its lease's end
//     frees the key: the advice is the whole time left on the lease (at
//     least RetryAfter), so that an obedient client comes back once, when
//     a takeover is due, not to another 409. The Retry-After header rounds
//     it up to whole seconds, so the client never arrives a fraction early.
//
// A client that wants an answer the moment a live owner has it sends
// Prefer: wait, which the owner's finish wakes.
func (e *Engine) inUseBy(rec Record, now time.Time) error {
	err := e.inUse()
	if rec.LeaseExpiresAt == nil {
		return err
	}
	left := rec.LeaseExpiresAt.Sub(now)
	silent := e.cfg.Lease - left
	if silent > e.cfg.OutsideCall+e.cfg.RetryAfter {
		err.(*KeyInUseError).RetryAfter = max(e.cfg.RetryAfter, left)
	}
	return err
}

// resume runs op as own and answers with what it came to: the answer it
// stored (final), or its result rendered afresh (not final: not stored).
func (e *Engine) resume(ctx context.Context, op Operation, own *Owner) (Reply, error) {
	// The client going away must not stop an operation halfway; every step
	// of it is bounded by its own timeout.
	own.op = op
	res, err := op.Resume(context.WithoutCancel(ctx), own)
	own.letGoAfter(ctx, err)
	if err != nil {
		if errors.Is(err, ErrFenced) {
			return e.afterLostWrite(ctx, own, err)
		}
		return Reply{}, &ResourceError{Resource: own.Resource, Err: err}
	}
	if own.answer != nil {
		resp := *own.answer
		if d, ok := op.(Disclosing); ok {
			if resp, err = d.RenderFirst(res); err != nil {
				return Reply{}, fmt.Errorf("render %s result: %w", own.Resource.Type, err)
			}
		}
		return Reply{Response: resp, Resource: own.Resource}, nil
	}
	resp, err := op.Render(res)
	if err != nil {
		return Reply{}, fmt.Errorf("render %s result: %w", own.Resource.Type, err)
	}
	reply := Reply{Response: resp, Resource: own.Resource}
	if wait := own.comeBack(e.clock.Now()); wait > e.cfg.RetryAfter {
		// Not known yet, and not before the look the owner booked: a
		// retry sooner would only find the same.
		reply.ComeBack = wait
	}
	return reply, nil
}

// afterLostWrite answers a request whose write was refused because another
// owner took the key over (Owner.Commit logged the refusal): the key's
// record, not this request, now speaks for the resource.
func (e *Engine) afterLostWrite(ctx context.Context, own *Owner, err error) (Reply, error) {
	rec, loadErr := LoadByID(ctx, e.db, own.KeyID)
	if loadErr != nil {
		return Reply{}, errors.Join(err, loadErr)
	}
	if rec.Response != nil {
		return rec.replay(), nil
	}
	return Reply{}, &KeyInUseError{RetryAfter: e.cfg.RetryAfter}
}
