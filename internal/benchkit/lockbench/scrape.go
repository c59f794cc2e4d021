package lockbench

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/benchkit"
)

// metricsScrape polls the agent's /v1/agent/metrics, which shows the last
// finished 10s interval, and keeps the consul.api.http counts of each.
type metricsScrape struct {
	c      *api.Client
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	seen map[int64]scraped // by the Unix second the interval starts
}

// scraped is one interval's counts; final once read after it ended (a young
// agent shows its current, unfinished interval).
type scraped struct {
	reqs  reqCounts
	final bool
}

const metricsInterval = 10 * time.Second // the agent's telemetry interval

func startMetricsScrape(c *api.Client) *metricsScrape {
	ctx, cancel := context.WithTimeout(context.Background(), runCap+time.Minute)
	m := &metricsScrape{c: c, cancel: cancel, done: make(chan struct{}), seen: map[int64]scraped{}}
	go func() {
		defer close(m.done)
		for ctx.Err() == nil {
			m.poll()
			select {
			case <-ctx.Done():
			case <-time.After(2 * time.Second):
			}
		}
	}()
	return m
}

func (m *metricsScrape) stop() { m.cancel(); <-m.done }

func (m *metricsScrape) poll() {
	info, err := m.c.Agent().Metrics()
	if err != nil {
		return
	}
	ts, err := time.Parse("2006-01-02 15:04:05 -0700 MST", info.Timestamp)
	if err != nil {
		return
	}
	var rc reqCounts
	for _, s := range info.Samples {
		if s.Name != "consul.api.http" {
			continue
		}
		path := "/" + strings.ReplaceAll(s.Labels["path"], "_", "/")
		// Only what `consul lock` sends: not the harness's readiness checks
		// nor this scrape.
		if strings.HasPrefix(path, "/v1/kv/") || strings.HasPrefix(path, "/v1/session/") || path == "/v1/agent/self" {
			rc[reqClass(path)] += int64(s.Count)
		}
	}
	final := time.Now().After(ts.Add(metricsInterval + 100*time.Millisecond))
	m.mu.Lock()
	if !m.seen[ts.Unix()].final {
		m.seen[ts.Unix()] = scraped{rc, final}
	}
	m.mu.Unlock()
}

// window sums the intervals that overlap [from, to], once the last of them
// has finished and been read, or says why it cannot.
func (m *metricsScrape) window(from, to time.Time) (reqCounts, string) {
	first, last := from.Truncate(metricsInterval), to.Truncate(metricsInterval)
	ok := benchkit.Poll(3*metricsInterval, func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.seen[last.Unix()].final
	})
	m.mu.Lock()
	defer m.mu.Unlock()
	var sum reqCounts
	if !ok {
		return sum, "n/a: the agent's metrics interval holding the end of the run was not seen"
	}
	for ts := first; !ts.After(last); ts = ts.Add(metricsInterval) {
		sc := m.seen[ts.Unix()]
		if !sc.final {
			return sum, "n/a: a metrics interval of the run was missed"
		}
		for i := range sum {
			sum[i] += sc.reqs[i]
		}
	}
	return sum, ""
}
