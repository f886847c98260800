package credential_test

import (
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/keel-run/keel/credential"
)

// BenchmarkCredentialLookup is the vault's cost per call: find the
// provider for the URL, read and open the grant, journal credential.used
// (SQLite, synchronous=FULL), and set the Authorization header. It
// reports p50 and p99.
func BenchmarkCredentialLookup(b *testing.B) {
	e := newEnvB(b)
	req := &credential.Request{Agent: "helper", User: "ann", Resource: "http://api.test/v1/items", RunID: "run1", CallID: "c1", Method: "GET"}
	hr, _ := http.NewRequest("GET", req.Resource, nil)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		c, err := e.vault.Credential(b.Context(), req)
		if err != nil {
			b.Fatal(err)
		}
		c.Apply(hr)
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	report(b, lat)
}

// BenchmarkCredentialLookupNoAudit is the same without a run (no
// credential.used event): the read path alone.
func BenchmarkCredentialLookupNoAudit(b *testing.B) {
	e := newEnvB(b)
	req := &credential.Request{Agent: "helper", User: "ann", Resource: "http://api.test/v1/items"}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if _, err := e.vault.Credential(b.Context(), req); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	report(b, lat)
}

// BenchmarkRefreshContention: 50 goroutines over 5 vaults ask for one
// grant right after its token expired; one refresh at the real OP
// serves all. Reported: the time until all 50 have the new token, and
// per-call p50/p99.
func BenchmarkRefreshContention(b *testing.B) {
	e := newEnvB(b)
	var vaults []*credential.Vault
	for range 5 {
		vaults = append(vaults, e.newVault(b, e.open(b)))
	}
	req := credential.Request{Agent: "helper", User: "ann", Resource: "http://api.test/v1/x"}
	var all []time.Duration
	var rounds []time.Duration
	b.ResetTimer()
	for range b.N {
		e.clock.Add(5 * time.Minute)
		var wg sync.WaitGroup
		var mu sync.Mutex
		start := time.Now()
		for i := range 50 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s := time.Now()
				if _, err := vaults[i%len(vaults)].Credential(b.Context(), &req); err != nil {
					b.Error(err)
				}
				mu.Lock()
				all = append(all, time.Since(s))
				mu.Unlock()
			}()
		}
		wg.Wait()
		rounds = append(rounds, time.Since(start))
	}
	b.StopTimer()
	report(b, all)
	slices.Sort(rounds)
	b.ReportMetric(float64(rounds[len(rounds)/2].Microseconds()), "round-p50-µs")
}

func report(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	if len(lat) == 0 {
		return
	}
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
