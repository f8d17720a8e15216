package stratago

import (
	"context"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Kafka's group.initial.rebalance.delay.ms is 3000 by default: a new group waits that
// long for more members before its first rebalance. Group tests start the broker with
// a short delay so that they do not spend most of their time waiting for it.
const groupInitialRebalanceDelayMs = "200"

func TestMain(m *testing.M) {
	if st, err := os.Stat(BinPath()); err != nil || st.IsDir() {
		fmt.Fprintf(os.Stderr, "strata binary not found at %s; build it (cargo build) or set STRATA_BIN\n", BinPath())
		os.Exit(2)
	}
	code := m.Run()
	apis.print()
	os.Exit(code)
}

// apiUse records, per top-level test, which Kafka APIs at which versions the test's
// clients sent (read off the request headers on the wire), for the compatibility
// ledger; printed at the end of the run.
type apiUse struct {
	mu sync.Mutex
	m  map[string]map[int16]map[int16]int // test -> api key -> version -> requests
}

var apis = &apiUse{m: map[string]map[int16]map[int16]int{}}

func (a *apiUse) add(test string, key, version int16) {
	a.mu.Lock()
	defer a.mu.Unlock()
	byKey := a.m[test]
	if byKey == nil {
		byKey = map[int16]map[int16]int{}
		a.m[test] = byKey
	}
	if byKey[key] == nil {
		byKey[key] = map[int16]int{}
	}
	byKey[key][version]++
}

func (a *apiUse) print() {
	a.mu.Lock()
	defer a.mu.Unlock()
	tests := make([]string, 0, len(a.m))
	for tn := range a.m {
		tests = append(tests, tn)
	}
	sort.Strings(tests)
	for _, tn := range tests {
		var keys []int
		for k := range a.m[tn] {
			keys = append(keys, int(k))
		}
		sort.Ints(keys)
		var parts []string
		for _, k := range keys {
			var vs []int
			for v := range a.m[tn][int16(k)] {
				vs = append(vs, int(v))
			}
			sort.Ints(vs)
			parts = append(parts, fmt.Sprintf("%s(%d) v%s", kmsg.NameForKey(int16(k)), k, strings.Trim(strings.Join(strings.Fields(fmt.Sprint(vs)), ","), "[]")))
		}
		fmt.Printf("APIs used by %s: %s\n", tn, strings.Join(parts, "; "))
	}
}

// sniffConn passes everything through and reports the api key and version of each
// request written (a request is int32 size, int16 key, int16 version, ...).
type sniffConn struct {
	net.Conn
	rec  func(key, version int16)
	hdr  []byte
	skip int
}

func (c *sniffConn) Write(p []byte) (int, error) {
	rest := p
	for len(rest) > 0 {
		if c.skip > 0 {
			n := min(c.skip, len(rest))
			c.skip -= n
			rest = rest[n:]
			continue
		}
		n := min(8-len(c.hdr), len(rest))
		c.hdr = append(c.hdr, rest[:n]...)
		rest = rest[n:]
		if len(c.hdr) == 8 {
			size := int(int32(uint32(c.hdr[0])<<24 | uint32(c.hdr[1])<<16 | uint32(c.hdr[2])<<8 | uint32(c.hdr[3])))
			c.rec(int16(uint16(c.hdr[4])<<8|uint16(c.hdr[5])), int16(uint16(c.hdr[6])<<8|uint16(c.hdr[7])))
			c.hdr = c.hdr[:0]
			c.skip = max(size-4, 0)
		}
	}
	return c.Conn.Write(p)
}

func sniffingDialer(test string) func(ctx context.Context, network, host string) (net.Conn, error) {
	var d net.Dialer
	return func(ctx context.Context, network, host string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, host)
		if err != nil {
			return nil, err
		}
		return &sniffConn{Conn: c, rec: func(k, v int16) { apis.add(test, k, v) }}, nil
	}
}

var topicSeq atomic.Int64

// uniqueName is prefix-<unix nanos>-<n>, unique within and across runs.
func uniqueName(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano(), topicSeq.Add(1))
}

// testLogger sends franz-go's log lines to t.Log while the test runs (and drops them
// after it ended: a client may still log while closing).
type testLogger struct {
	mu    sync.Mutex
	t     testing.TB
	level kgo.LogLevel
	name  string
	done  bool
}

func newTestLogger(t testing.TB, name string) *testLogger {
	lvl := kgo.LogLevelWarn
	switch strings.ToLower(os.Getenv("KGO_LOG")) {
	case "debug":
		lvl = kgo.LogLevelDebug
	case "info":
		lvl = kgo.LogLevelInfo
	case "error":
		lvl = kgo.LogLevelError
	case "none":
		lvl = kgo.LogLevelNone
	}
	l := &testLogger{t: t, level: lvl, name: name}
	t.Cleanup(func() {
		l.mu.Lock()
		l.done = true
		l.mu.Unlock()
	})
	return l
}

func (l *testLogger) Level() kgo.LogLevel { return l.level }

func (l *testLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "[kgo %s %s] %s", l.name, level, msg)
	for i := 0; i+1 < len(keyvals); i += 2 {
		fmt.Fprintf(&sb, " %v=%v", keyvals[i], keyvals[i+1])
	}
	l.t.Log(sb.String())
}

// newClient makes a franz-go client seeded with the broker, closed at cleanup.
func newClient(t testing.TB, b *Broker, name string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	all := append([]kgo.Opt{
		kgo.SeedBrokers(b.Addr()),
		kgo.ClientID("strata-go-" + name),
		kgo.WithLogger(newTestLogger(t, name)),
		kgo.Dialer(sniffingDialer(strings.SplitN(t.Name(), "/", 2)[0])),
	}, opts...)
	cl, err := kgo.NewClient(all...)
	if err != nil {
		t.Fatalf("kgo.NewClient(%s): %v", name, err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func newAdmin(t testing.TB, b *Broker) *kadm.Client {
	t.Helper()
	return kadm.NewClient(newClient(t, b, "admin"))
}

// freshMeta makes kadm's ListTopics / Metadata send a Metadata request rather than
// answer from franz-go's metadata cache (kept for MetadataMinAge, 5 s; an all-topics
// listing from the cache even includes an unknown topic's error entry left there by
// a named request). kadm bypasses the cache when authorized operations are asked for.
func freshMeta(ctx context.Context) context.Context {
	return kadm.WithAuthorizedOps(ctx)
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond every 50 ms until it returns true or the timeout passes; the
// test fails with the last explanation cond gave.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s: %s", timeout, what, why)
		}
		time.Sleep(50 * time.Millisecond) // poll interval
	}
}

// createTopic creates a topic (replication factor 1) and waits until metadata shows
// every partition with a leader.
func createTopic(t testing.TB, adm *kadm.Client, topic string, partitions int32, configs map[string]*string) {
	t.Helper()
	resp, err := adm.CreateTopic(ctxTimeout(t, 20*time.Second), partitions, 1, configs, topic)
	if err != nil {
		t.Fatalf("CreateTopic %s: %v (%s)", topic, err, resp.ErrMessage)
	}
	waitForLeaders(t, adm, topic, int(partitions))
}

func waitForLeaders(t testing.TB, adm *kadm.Client, topic string, partitions int) {
	t.Helper()
	waitFor(t, 20*time.Second, "leaders of "+topic, func() (bool, string) {
		td, err := adm.ListTopics(freshMeta(ctxTimeout(t, 5*time.Second)), topic)
		if err != nil {
			return false, err.Error()
		}
		d, ok := td[topic]
		if !ok || d.Err != nil {
			return false, fmt.Sprintf("topic detail %+v", d)
		}
		if len(d.Partitions) != partitions {
			return false, fmt.Sprintf("%d partitions", len(d.Partitions))
		}
		for _, p := range d.Partitions {
			if p.Err != nil || p.Leader < 0 {
				return false, fmt.Sprintf("partition %d: leader %d err %v", p.Partition, p.Leader, p.Err)
			}
		}
		return true, ""
	})
}

// consumeN reads the topic from the start without a group until n records arrived
// (failing after timeout); it returns them in the order they were polled.
func consumeN(t testing.TB, b *Broker, topic string, n int, timeout time.Duration, opts ...kgo.Opt) []*kgo.Record {
	t.Helper()
	cl := newClient(t, b, "reader", append([]kgo.Opt{
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}, opts...)...)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records of %s within %v", len(out), n, topic, timeout)
		}
		fs.EachError(func(tp string, p int32, err error) {
			t.Errorf("fetch error %s[%d]: %v", tp, p, err)
		})
		out = append(out, fs.Records()...)
	}
	if len(out) > n {
		t.Errorf("consumed %d records of %s, expected %d", len(out), topic, n)
	}
	return out
}

// endOffsets is ListEndOffsets as partition -> offset, failing on any error.
func endOffsets(t testing.TB, adm *kadm.Client, topic string) map[int32]int64 {
	t.Helper()
	lo, err := adm.ListEndOffsets(ctxTimeout(t, 10*time.Second), topic)
	if err != nil {
		t.Fatalf("ListEndOffsets %s: %v", topic, err)
	}
	if err := lo.Error(); err != nil {
		t.Fatalf("ListEndOffsets %s: %v", topic, err)
	}
	out := map[int32]int64{}
	lo.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

func sortedInt32s(m map[int32]struct{}) []int32 {
	s := make([]int32, 0, len(m))
	for p := range m {
		s = append(s, p)
	}
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s
}
