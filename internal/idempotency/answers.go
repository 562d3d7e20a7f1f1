package idempotency

// Answers is an optional cache of final answers: a retry of a finished key
// that it holds is replayed without reading the key's record. It is off
// unless the service is configured with one (REPLAY_CACHE=memory, package
// answercache); without it every retry reads the record, as the protocol
// reads it.
//
// The engine offers it only records the database has just answered, each a
// final answer (one that never changes), and asks the record's own Decide
// whether a cached record may be replayed: a cache can only make a replay
// cheaper, never answer what the database would not. What a cache must
// guard against is its own staleness: the database it read from may fail
// over to a standby that lost the last commits, and the cache must then
// not replay what the new primary does not hold (package answercache says
// how its memory does it, and what window is left).
type Answers interface {
	// Answer returns the record kept for scope, if any.
	Answer(scope Scope) (Record, bool)
	// Keep offers rec, the finished record the database just answered for
	// scope (rec.Scope may hold an operation's former name: Renamed).
	Keep(scope Scope, rec Record)
}

// cachedReplay answers req from the cache, if there is one, it holds req's
// key, and the kept record says to replay it.
func (e *Engine) cachedReplay(req Request) (Reply, bool) {
	if e.answers == nil {
		return Reply{}, false
	}
	rec, ok := e.answers.Answer(req.Scope)
	if !ok || rec.Decide(req.Fingerprint, e.clock.Now(), e.cfg.ReplayTTL) != DecideReplay {
		return Reply{}, false
	}
	e.metrics.IdempotencyReplays.Inc()
	return rec.replay(), true
}
