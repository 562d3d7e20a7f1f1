package idempotency

import (
	"hash/maphash"
	"sync"
)

// hints remembers which scopes this engine has recently seen taken: keys it
// claimed, and keys whose claim found them taken. It is a hint of what to
// do first, never an answer. A request whose scope it holds reads the
// key's record before trying the claim (one statement, no transaction that
// writes), so a retry that reaches the instance that saw its key is not
// sent the claim's batch, whose every statement would do nothing. The
// record read is the database's, as on any other path: a hint that is
// wrong (a hash collision, a key clean-up deleted, the tail of commits a
// failover lost) costs one read that finds nothing, and the request claims
// the key as if it had no hint.
//
// It holds at most two generations of hintsPerGeneration scopes, as 64-bit
// hashes: when the newer fills up, the older is dropped. About 2 MB.
type hints struct {
	seed maphash.Seed
	mu   sync.Mutex
	seen generations[uint64, struct{}]
}

// hintsPerGeneration is how many scopes a generation holds: at a thousand
// new keys a second, a key is remembered for one to two minutes, which
// covers a client's retries after a timeout.
const hintsPerGeneration = 1 << 16

func newHints() *hints {
	return &hints{seed: maphash.MakeSeed(), seen: newGenerations[uint64, struct{}](hintsPerGeneration)}
}

// hash is s's entry: computed once per request, for taken and add.
func (h *hints) hash(s Scope) uint64 {
	var m maphash.Hash
	m.SetSeed(h.seed)
	m.WriteString(s.Tenant)
	m.WriteByte(0)
	m.WriteString(s.Operation)
	m.WriteByte(0)
	m.WriteString(s.Key)
	return m.Sum64()
}

// add remembers that the scope hashed to k is taken.
func (h *hints) add(k uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seen.put(k, struct{}{})
}

// taken reports whether the scope hashed to k was seen taken lately.
func (h *hints) taken(k uint64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.seen.get(k)
	return ok
}
