package idempotency

// generations is a bounded memory of what was seen lately: two maps of at
// most per entries each, and when the newer fills up, the older is dropped
// (so it holds the last per to 2*per entries). Its owner locks it.
type generations[K comparable, V any] struct {
	per        int
	young, old map[K]V
}

func newGenerations[K comparable, V any](per int) generations[K, V] {
	return generations[K, V]{per: per, young: make(map[K]V, per)}
}

// put remembers v for k.
func (g *generations[K, V]) put(k K, v V) {
	if len(g.young) >= g.per {
		g.old, g.young = g.young, make(map[K]V, g.per)
	}
	g.young[k] = v
}

// get is what was remembered for k, if it still is.
func (g *generations[K, V]) get(k K) (V, bool) {
	v, ok := g.young[k]
	if !ok {
		v, ok = g.old[k]
	}
	return v, ok
}
