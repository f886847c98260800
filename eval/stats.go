package eval

import (
	"math"
	"slices"
)

// z95 is the normal quantile of a two-sided 95% interval.
const z95 = 1.959963984540054

// Wilson returns the Wilson score 95% interval of a success rate of k
// successes in n trials ([0, 0] when n is 0).
func Wilson(k, n int) (lo, hi float64) {
	if n == 0 {
		return 0, 0
	}
	p := float64(k) / float64(n)
	nf := float64(n)
	z2 := z95 * z95
	den := 1 + z2/nf
	mid := (p + z2/(2*nf)) / den
	half := z95 * math.Sqrt(p*(1-p)/nf+z2/(4*nf*nf)) / den
	return math.Max(0, mid-half), math.Min(1, mid+half)
}

// PassAtK is the unbiased estimate of the chance that at least one of k
// trials drawn from n (of which c passed) passes: 1 − C(n−c, k)/C(n, k).
// It is NaN when k > n.
func PassAtK(n, c, k int) float64 {
	if k > n || k <= 0 {
		return math.NaN()
	}
	if n-c < k {
		return 1
	}
	return 1 - ratio(n-c, n, k)
}

// PassHatK (pass^k) is the estimate of the chance that all of k trials
// drawn from n (of which c passed) pass: C(c, k)/C(n, k), the reliability
// measure of τ-bench. It is NaN when k > n.
func PassHatK(n, c, k int) float64 {
	if k > n || k <= 0 {
		return math.NaN()
	}
	if c < k {
		return 0
	}
	return ratio(c, n, k)
}

// ratio is C(a, k)/C(n, k) for a ≤ n, computed as a product.
func ratio(a, n, k int) float64 {
	r := 1.0
	for i := 0; i < k; i++ {
		r *= float64(a-i) / float64(n-i)
	}
	return r
}

// DiffInterval is Newcombe's hybrid score 95% interval (method 10) of the
// difference p2 − p1 of two independent proportions k1/n1 and k2/n2.
func DiffInterval(k1, n1, k2, n2 int) (d, lo, hi float64) {
	if n1 == 0 || n2 == 0 {
		return 0, math.NaN(), math.NaN()
	}
	p1, p2 := float64(k1)/float64(n1), float64(k2)/float64(n2)
	l1, u1 := Wilson(k1, n1)
	l2, u2 := Wilson(k2, n2)
	d = p2 - p1
	lo = d - math.Sqrt((p2-l2)*(p2-l2)+(u1-p1)*(u1-p1))
	hi = d + math.Sqrt((u2-p2)*(u2-p2)+(p1-l1)*(p1-l1))
	return d, lo, hi
}

// Summary is the distribution of a quantity over trials.
type Summary struct {
	N      int     `json:"n"`
	Mean   float64 `json:"mean"`
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	Stdev  float64 `json:"stdev"`
}

// Summarize returns the summary of xs (which it sorts).
func Summarize(xs []float64) Summary {
	s := Summary{N: len(xs)}
	if len(xs) == 0 {
		return s
	}
	slices.Sort(xs)
	s.Min, s.Max = xs[0], xs[len(xs)-1]
	var sum float64
	for _, x := range xs {
		sum += x
	}
	s.Mean = sum / float64(len(xs))
	if n := len(xs); n%2 == 1 {
		s.Median = xs[n/2]
	} else {
		s.Median = (xs[n/2-1] + xs[n/2]) / 2
	}
	if len(xs) > 1 {
		var ss float64
		for _, x := range xs {
			ss += (x - s.Mean) * (x - s.Mean)
		}
		s.Stdev = math.Sqrt(ss / float64(len(xs)-1))
	}
	return s
}
