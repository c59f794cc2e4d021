package testkit

import "time"

// Peak samples a measure every interval, in a goroutine of its own, until
// Stop, and keeps the largest value it saw: how many nodes are down at
// once, say. It checks nothing itself; the test judges what Stop returns.
type Peak struct {
	stop, done chan struct{}
	max, n     int
}

// StartPeak starts sampling measure, whose ok false skips a sample (a read
// that failed).
func StartPeak(interval time.Duration, measure func() (v int, ok bool)) *Peak {
	p := &Peak{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			if v, ok := measure(); ok {
				p.n++
				p.max = max(p.max, v)
			}
			select {
			case <-p.stop:
				return
			case <-time.After(interval):
			}
		}
	}()
	return p
}

// Stop ends the sampling and returns the largest value seen and how many
// samples were taken.
func (p *Peak) Stop() (peak, samples int) {
	close(p.stop)
	<-p.done
	return p.max, p.n
}
