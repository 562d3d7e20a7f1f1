package moneysim

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// defaultSeeds is how many seeds a plain `go test` (make test) runs.
const defaultSeeds = 10

var (
	seedFlag  = flag.String("sim.seed", "", "replay this one seed (or SIM_SEED)")
	seedsFlag = flag.Int("sim.seeds", 0, "how many seeds to run (or SIM_SEEDS; default 10)")
	startFlag = flag.String("sim.start", "", "the first seed of the run (or SIM_START; default random)")
)

func setting(flagValue, env string) string {
	if flagValue != "" {
		return flagValue
	}
	return os.Getenv(env)
}

func parseSeed(t *testing.T, s string) uint64 {
	n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
	if err != nil {
		t.Fatalf("seed %q: %v", s, err)
	}
	return n
}

// seeds are the run's seeds: one to replay, or n consecutive ones from a
// start that is random unless given.
func seeds(t *testing.T) []uint64 {
	if s := setting(*seedFlag, "SIM_SEED"); s != "" {
		return []uint64{parseSeed(t, s)}
	}
	n := *seedsFlag
	if s := os.Getenv("SIM_SEEDS"); n == 0 && s != "" {
		n = int(parseSeed(t, s))
	}
	if n <= 0 {
		n = defaultSeeds
	}
	start := rand.Uint64N(1_000_000_000)
	if s := setting(*startFlag, "SIM_START"); s != "" {
		start = parseSeed(t, s)
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = start + uint64(i)
	}
	return out
}

// TestSimulation runs the money's whole life (payments, refunds, their
// retries, crashes, webhooks and the reconciler, over days of simulated
// time) against the real service and PostgreSQL, once per seed, and checks
// the invariants of package moneysim's doc. A failing seed prints the
// command that replays it.
func TestSimulation(t *testing.T) {
	list := seeds(t)
	t.Logf("seeds %d..%d, commit mode %q (replay one: -sim.seed=N or SIM_SEED=N; this range: -sim.start=%d -sim.seeds=%d)",
		list[0], list[len(list)-1], pgtest.CommitMode(), list[0], len(list))
	for _, seed := range list {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			runSeed(t, seed)
		})
	}
}

// runSeed plays seed's run and reports what it broke.
func runSeed(t *testing.T, seed uint64) {
	w := newWorld(t, seed)
	w.run()
	w.saveTrace()
	for _, n := range w.notes {
		t.Logf("note: %s", n)
	}
	w.report()
}

// A seed is a run: played twice, it does the same things at the same
// simulated times, so that a failing seed can be replayed and debugged.
func TestSimulationReplaysItsSeed(t *testing.T) {
	t.Parallel()
	seed := uint64(rand.Uint64N(1_000_000_000))
	for manualShare(seed) == 0 || threeDSShare(seed) == 0 { // a seed with manual and 3-D Secure payments: every stream
		seed++
	}
	var traces [2][]string
	for i := range traces {
		w := newWorld(t, seed)
		w.run()
		traces[i] = w.trace
	}
	a, b := traces[0], traces[1]
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			t.Fatalf("seed %d played twice diverged at step %d:\n  %s\n  %s", seed, i, a[i], b[i])
		}
	}
	if len(a) != len(b) {
		t.Fatalf("seed %d played twice: %d and %d steps", seed, len(a), len(b))
	}
	if len(a) < 10 {
		t.Fatalf("seed %d did almost nothing: %v", seed, a)
	}
}

// saveTrace writes the run's whole trace to $SIM_TRACE_FILE.<seed>, if set
// (to compare two versions of a run line by line).
func (w *world) saveTrace() {
	path := os.Getenv("SIM_TRACE_FILE")
	if path == "" {
		return
	}
	if err := os.WriteFile(fmt.Sprintf("%s.%d", path, w.seed), []byte(strings.Join(w.trace, "\n")+"\n"), 0o644); err != nil {
		w.t.Fatal(err)
	}
}

// manualShare is the knob PManual seed draws.
func manualShare(seed uint64) float64 {
	var k Knobs
	drawManualKnobs(newWorldRand(seed).mrng, &k)
	return k.PManual
}

// threeDSShare is the knob PThreeDS seed draws.
func threeDSShare(seed uint64) float64 {
	var k Knobs
	drawAuthenticationKnobs(newWorldRand(seed).arng, &k)
	return k.PThreeDS
}

// foundSeeds are seeds that once broke an invariant, each fixed since: they
// run in every `make test`, whatever range TestSimulation draws.
var foundSeeds = []uint64{
	841,                        // a capture processed late just before its expiry (the simulated provider's LookupLag declaration)
	3434,                       // an expiry void left for a person with a capture its client then ended (Engine.QueueWake)
	5696,                       // a client's cancel that waited on the expiry's void left for a person after 20 looks (awaitHolder)
	61537, 72116, 80187, 80202, // an authorization seen while the abandonment's cancellation was on its way (Authentications.settle)
}

// TestSimulationFoundSeeds replays foundSeeds.
func TestSimulationFoundSeeds(t *testing.T) {
	for _, seed := range foundSeeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			runSeed(t, seed)
		})
	}
}
