package stratago

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

const (
	grpPartitions = 6
	grpPerPhase   = 600 // records produced before each phase
)

// consumption is every value consumed in the group test, by which member, shared by
// all members.
type consumption struct {
	mu         sync.Mutex
	byValue    map[string][]string // value -> members that consumed it
	violations []string            // records consumed from a partition the member did not own
	errs       []string            // fetch and commit errors
}

func (c *consumption) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byValue)
}

func (c *consumption) problems() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append(append([]string(nil), c.violations...), c.errs...)
}

// member is one consumer of the group: cooperative-sticky, manual commits of
// everything it polled (synchronously, before it lets a rebalance go on, so that no
// record is consumed twice across rebalances).
type member struct {
	name string
	cl   *kgo.Client
	c    *consumption

	mu       sync.Mutex
	owned    map[int32]struct{}
	assigned [][]int32 // each OnPartitionsAssigned call, in order
	revoked  [][]int32 // each non-empty OnPartitionsRevoked call
	lost     [][]int32
	polled   int

	stop chan struct{}
	done chan struct{}
}

func partsOf(m map[string][]int32, topic string) []int32 {
	ps := append([]int32(nil), m[topic]...)
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	return ps
}

func startMember(t *testing.T, b *Broker, name, group, topic string, c *consumption) *member {
	m := &member{name: name, c: c, owned: map[int32]struct{}{}, stop: make(chan struct{}), done: make(chan struct{})}
	m.cl = newClient(t, b, name,
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.HeartbeatInterval(500*time.Millisecond),
		kgo.SessionTimeout(10*time.Second),
		kgo.FetchMaxWait(500*time.Millisecond),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) {
			m.mu.Lock()
			defer m.mu.Unlock()
			ps := partsOf(a, topic)
			for _, p := range ps {
				m.owned[p] = struct{}{}
			}
			m.assigned = append(m.assigned, ps)
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, r map[string][]int32) {
			m.mu.Lock()
			defer m.mu.Unlock()
			ps := partsOf(r, topic)
			for _, p := range ps {
				delete(m.owned, p)
			}
			if len(ps) > 0 {
				m.revoked = append(m.revoked, ps)
			}
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, l map[string][]int32) {
			m.mu.Lock()
			defer m.mu.Unlock()
			ps := partsOf(l, topic)
			for _, p := range ps {
				delete(m.owned, p)
			}
			m.lost = append(m.lost, ps)
		}),
	)
	go m.run()
	return m
}

func (m *member) run() {
	defer close(m.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-m.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		fs := m.cl.PollRecords(ctx, 200)
		if fs.IsClientClosed() {
			return
		}
		fs.EachError(func(tp string, p int32, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			m.c.mu.Lock()
			m.c.errs = append(m.c.errs, fmt.Sprintf("%s: fetch %s[%d]: %v", m.name, tp, p, err))
			m.c.mu.Unlock()
		})
		recs := fs.Records()
		if len(recs) > 0 {
			m.mu.Lock()
			m.polled += len(recs)
			owned := map[int32]bool{}
			for p := range m.owned {
				owned[p] = true
			}
			m.mu.Unlock()
			m.c.mu.Lock()
			for _, r := range recs {
				v := string(r.Value)
				m.c.byValue[v] = append(m.c.byValue[v], m.name)
				if !owned[r.Partition] {
					m.c.violations = append(m.c.violations, fmt.Sprintf("%s consumed %s at %d[%d] without owning the partition", m.name, v, r.Partition, r.Offset))
				}
			}
			m.c.mu.Unlock()
			// Not the poll context: what was polled is committed even when stopping.
			cctx, ccancel := context.WithTimeout(context.Background(), 15*time.Second)
			err := m.cl.CommitRecords(cctx, recs...)
			ccancel()
			if err != nil {
				m.c.mu.Lock()
				m.c.errs = append(m.c.errs, fmt.Sprintf("%s: commit of %d records: %v", m.name, len(recs), err))
				m.c.mu.Unlock()
			}
		}
		m.cl.AllowRebalance()
		if ctx.Err() != nil {
			return
		}
	}
}

// close stops polling and closes the client (which leaves the group).
func (m *member) close() {
	close(m.stop)
	<-m.done
	m.cl.AllowRebalance()
	m.cl.Close()
}

func (m *member) ownedNow() []int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return sortedInt32s(m.owned)
}

func (m *member) revokedNow() [][]int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([][]int32(nil), m.revoked...)
}

func (m *member) lostNow() [][]int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([][]int32(nil), m.lost...)
}

func produceValues(t *testing.T, cl *kgo.Client, topic, prefix string, n int) []string {
	t.Helper()
	vals := make([]string, n)
	recs := make([]*kgo.Record, n)
	for i := range recs {
		vals[i] = fmt.Sprintf("%s-%05d", prefix, i)
		recs[i] = &kgo.Record{Topic: topic, Partition: int32(i % grpPartitions), Key: []byte(vals[i]), Value: []byte(vals[i])}
	}
	if err := cl.ProduceSync(ctxTimeout(t, 30*time.Second), recs...).FirstErr(); err != nil {
		t.Fatalf("produce %s: %v", prefix, err)
	}
	return vals
}

// balanced reports whether the members' current partitions are disjoint, cover all
// of the topic, and differ in size by at most one.
func balanced(ms []*member) (bool, string) {
	seen := map[int32]string{}
	var desc []string
	min, max := grpPartitions, 0
	for _, m := range ms {
		own := m.ownedNow()
		desc = append(desc, fmt.Sprintf("%s=%v", m.name, own))
		for _, p := range own {
			if o, dup := seen[p]; dup {
				return false, fmt.Sprintf("partition %d owned by %s and %s (%s)", p, o, m.name, strings.Join(desc, " "))
			}
			seen[p] = m.name
		}
		if len(own) < min {
			min = len(own)
		}
		if len(own) > max {
			max = len(own)
		}
	}
	s := strings.Join(desc, " ")
	if len(seen) != grpPartitions {
		return false, fmt.Sprintf("%d of %d partitions owned: %s", len(seen), grpPartitions, s)
	}
	if max-min > 1 {
		return false, "unbalanced: " + s
	}
	return true, s
}

func waitConsumed(t *testing.T, c *consumption, n int, what string) {
	t.Helper()
	waitFor(t, 60*time.Second, what, func() (bool, string) {
		got := c.count()
		return got >= n, fmt.Sprintf("%d of %d distinct values consumed; problems: %v", got, n, c.problems())
	})
}

func waitGroupStable(t *testing.T, adm *kadm.Client, group string, members int) kadm.DescribedGroup {
	t.Helper()
	var last kadm.DescribedGroup
	waitFor(t, 30*time.Second, fmt.Sprintf("group %s Stable with %d members", group, members), func() (bool, string) {
		dg, err := adm.DescribeGroups(ctxTimeout(t, 5*time.Second), group)
		if err != nil {
			return false, err.Error()
		}
		last = dg[group]
		if last.Err != nil {
			return false, last.Err.Error()
		}
		return last.State == "Stable" && len(last.Members) == members,
			fmt.Sprintf("state %s, %d members", last.State, len(last.Members))
	})
	return last
}

// TestConsumerGroupCooperativeSticky: two members split the partitions, a third joins
// and takes partitions from them without the others giving up the partitions they
// keep (cooperative rebalancing), every record is consumed exactly once across the
// members with synchronous commits, and a new client resumes from the committed
// offsets.
func TestConsumerGroupCooperativeSticky(t *testing.T) {
	b := StartBroker(t, "--group-initial-rebalance-delay-ms", groupInitialRebalanceDelayMs)
	adm := newAdmin(t, b)
	topic := uniqueName("go-grp")
	group := uniqueName("go-grp-coop")
	createTopic(t, adm, topic, grpPartitions, nil)
	prod := newClient(t, b, "producer", kgo.RecordPartitioner(kgo.ManualPartitioner()))
	c := &consumption{byValue: map[string][]string{}}
	var produced []string

	// Phase 1: two members.
	produced = append(produced, produceValues(t, prod, topic, "a", grpPerPhase)...)
	m1 := startMember(t, b, "m1", group, topic, c)
	m2 := startMember(t, b, "m2", group, topic, c)
	waitFor(t, 30*time.Second, "m1 and m2 to split the partitions", func() (bool, string) {
		ok, s := balanced([]*member{m1, m2})
		return ok && len(m1.ownedNow()) > 0 && len(m2.ownedNow()) > 0, s
	})
	dg := waitGroupStable(t, adm, group, 2)
	if dg.Protocol != "cooperative-sticky" || dg.ProtocolType != "consumer" {
		t.Errorf("group protocol %q type %q, expected cooperative-sticky / consumer", dg.Protocol, dg.ProtocolType)
	}
	waitConsumed(t, c, len(produced), "phase 1 records")
	before1, before2 := m1.ownedNow(), m2.ownedNow()
	t.Logf("two members: m1=%v m2=%v", before1, before2)
	rev1, rev2 := len(m1.revokedNow()), len(m2.revokedNow())

	// Phase 2: a third member joins while records keep coming (so that members are
	// consuming and committing across the rebalance); partitions move to it.
	stopBg, bgDone := make(chan struct{}), make(chan []string)
	go func() {
		var vals []string
		defer func() { bgDone <- vals }()
		for i := 0; i < 6000; i += grpPartitions * 2 {
			select {
			case <-stopBg:
				return
			default:
			}
			recs := make([]*kgo.Record, 0, grpPartitions*2)
			for j := i; j < i+grpPartitions*2; j++ {
				v := fmt.Sprintf("b-%05d", j)
				recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(j % grpPartitions), Key: []byte(v), Value: []byte(v)})
			}
			if err := prod.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
				c.mu.Lock()
				c.errs = append(c.errs, fmt.Sprintf("background produce: %v", err))
				c.mu.Unlock()
				return
			}
			for _, r := range recs {
				vals = append(vals, string(r.Value))
			}
		}
	}()
	m3 := startMember(t, b, "m3", group, topic, c)
	waitFor(t, 45*time.Second, "m3 to get partitions", func() (bool, string) {
		ok, s := balanced([]*member{m1, m2, m3})
		return ok && len(m3.ownedNow()) > 0, s
	})
	close(stopBg)
	bgVals := <-bgDone
	produced = append(produced, bgVals...)
	t.Logf("%d records produced while m3 joined", len(bgVals))
	dg = waitGroupStable(t, adm, group, 3)
	after1, after2, after3 := m1.ownedNow(), m2.ownedNow(), m3.ownedNow()
	t.Logf("three members: m1=%v m2=%v m3=%v", after1, after2, after3)
	// Cooperative: m1 and m2 keep a subset of what they had, and give up only the
	// partitions that moved to m3.
	for _, x := range []struct {
		name          string
		before, after []int32
		revoked       [][]int32
	}{{"m1", before1, after1, m1.revokedNow()[rev1:]}, {"m2", before2, after2, m2.revokedNow()[rev2:]}} {
		had := map[int32]bool{}
		for _, p := range x.before {
			had[p] = true
		}
		for _, p := range x.after {
			if !had[p] {
				t.Errorf("%s got partition %d in the rebalance that added m3 (had %v, has %v)", x.name, p, x.before, x.after)
			}
		}
		kept := map[int32]bool{}
		for _, p := range x.after {
			kept[p] = true
		}
		for _, ps := range x.revoked {
			for _, p := range ps {
				if kept[p] {
					t.Errorf("%s had partition %d revoked though it kept it (eager, not cooperative): revoked %v", x.name, p, x.revoked)
				}
			}
		}
		if len(x.after) == 0 {
			t.Errorf("%s lost all its partitions", x.name)
		}
	}
	if len(after3) != grpPartitions/3 {
		t.Errorf("m3 owns %v, expected %d partitions", after3, grpPartitions/3)
	}
	if got := dg.AssignedPartitions()[topic]; len(got) != grpPartitions {
		t.Errorf("DescribeGroups: %d partitions assigned, expected %d", len(got), grpPartitions)
	}
	// Records produced after the rebalance go to the partitions' new owners.
	b2 := produceValues(t, prod, topic, "b2", grpPerPhase)
	produced = append(produced, b2...)
	waitConsumed(t, c, len(produced), "phase 2 records")
	owner := map[int32]string{}
	for _, m := range []*member{m1, m2, m3} {
		for _, p := range m.ownedNow() {
			owner[p] = m.name
		}
	}
	c.mu.Lock()
	for i, v := range b2 {
		if by := c.byValue[v]; len(by) != 1 || by[0] != owner[int32(i%grpPartitions)] {
			t.Errorf("%s (partition %d, owned by %s) consumed by %v", v, i%grpPartitions, owner[int32(i%grpPartitions)], by)
		}
	}
	c.mu.Unlock()

	// Everything consumed so far is committed: the committed offsets are the end offsets.
	end := endOffsets(t, adm, topic)
	waitFor(t, 15*time.Second, "committed offsets to reach the end offsets", func() (bool, string) {
		os, err := adm.FetchOffsets(ctxTimeout(t, 5*time.Second), group)
		if err != nil {
			return false, err.Error()
		}
		for p, e := range end {
			o, ok := os.Lookup(topic, p)
			if !ok || o.Err != nil || o.At != e {
				return false, fmt.Sprintf("partition %d: committed %+v, end %d", p, o, e)
			}
		}
		return true, ""
	})

	// Phase 3: all members leave; a new client of the group resumes from the commits.
	for _, m := range []*member{m1, m2, m3} {
		m.close()
	}
	for _, m := range []*member{m1, m2, m3} {
		if l := m.lostNow(); len(l) > 0 {
			t.Errorf("%s lost partitions (a fatal group error): %v", m.name, l)
		}
	}
	produced = append(produced, produceValues(t, prod, topic, "c", grpPerPhase)...)
	m4 := startMember(t, b, "m4", group, topic, c)
	waitConsumed(t, c, len(produced), "phase 3 records")
	// Nothing more is to come: poll for another second and count again.
	extra := 0
	func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		<-ctx.Done()
		m4.mu.Lock()
		extra = m4.polled - grpPerPhase
		m4.mu.Unlock()
	}()
	m4.close()
	if extra != 0 {
		t.Errorf("the restarted client polled %d records more than the %d produced after the commits", extra, grpPerPhase)
	}

	// Exactly once in total.
	c.mu.Lock()
	defer c.mu.Unlock()
	dups, missing := 0, 0
	for _, v := range produced {
		switch n := len(c.byValue[v]); {
		case n == 0:
			missing++
			if missing <= 5 {
				t.Errorf("%s never consumed", v)
			}
		case n > 1:
			dups++
			if dups <= 5 {
				t.Errorf("%s consumed %d times, by %v", v, n, c.byValue[v])
			}
		}
	}
	if len(c.byValue) != len(produced) {
		t.Errorf("consumed %d distinct values, produced %d", len(c.byValue), len(produced))
	}
	for _, p := range append(c.violations, c.errs...) {
		t.Error(p)
	}
	per := map[string]int{}
	for _, ms := range c.byValue {
		for _, m := range ms {
			per[m]++
		}
	}
	t.Logf("produced %d, consumed %d distinct (%d duplicated, %d missing); per member %v",
		len(produced), len(c.byValue), dups, missing, per)
}
