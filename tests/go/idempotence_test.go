package stratago

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

const (
	idemRecords    = 20000
	idemPartitions = 3
)

// TestIdempotentProducerSurvivesBrokerKill: franz-go's producer is idempotent by
// default. It produces idemRecords records with acks=all (3 partitions) while the only
// agent is SIGKILLed three times, after a quarter, a half and three quarters of the
// records were acknowledged, and restarted on the same data dir and ports.
//
// Each crash is made to catch batches that are in the log but unacknowledged: the
// producer's connections stop delivering responses (the "response gate"), the test
// waits until the log holds records the producer has no acknowledgement for, then
// SIGKILLs the agent and fails those connections, so the unanswered answers are lost
// as in a real crash. The producer retries those batches with their original producer
// id, epoch and sequence numbers after the restart: the restarted agent must know them
// (producer state survives the crash) and answer with the offsets they already have,
// not append them again.
//
// Afterwards: every record acknowledged, each in the log exactly once, at the offset it
// was acknowledged at, in send order per partition, nothing else in the log, and no
// data loss reported by franz-go.
func TestIdempotentProducerSurvivesBrokerKill(t *testing.T) {
	b := StartBroker(t)
	adm := newAdmin(t, b)
	topic := uniqueName("go-idem")
	createTopic(t, adm, topic, idemPartitions, nil)

	type ack struct {
		partition int32
		offset    int64
	}
	var (
		mu        sync.Mutex
		acked     = make(map[int]ack, idemRecords)
		ackTwice  []string
		failures  []string
		dataLoss  []string
		ackCount  atomic.Int64
		sent      atomic.Int64
		killAt    = []int64{idemRecords / 4, idemRecords / 2, 3 * idemRecords / 4}
		reachedCh = make(chan int64, len(killAt))
	)
	gate := newResponseGate(sniffingDialer(t.Name()))
	counts := &produceCounts{}
	prod := newClient(t, b, "idem-producer",
		kgo.Dialer(gate.dial),
		kgo.WithHooks(counts),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.MaxBufferedRecords(2000),
		kgo.ProducerBatchMaxBytes(16*1024), // several batches per partition in flight
		kgo.ProducerLinger(5*time.Millisecond),
		// A failed produce request waits for a metadata refresh, and refreshes are at
		// least MetadataMinAge (5 s by default) apart: do not spend that after each crash.
		kgo.MetadataMinAge(250*time.Millisecond),
		kgo.ProducerOnDataLossDetected(func(topic string, p int32) {
			mu.Lock()
			dataLoss = append(dataLoss, fmt.Sprintf("%s[%d]", topic, p))
			mu.Unlock()
		}),
	)

	promise := func(r *kgo.Record, err error) {
		seq, _ := strconv.Atoi(strings.TrimPrefix(string(r.Value), "idem-"))
		mu.Lock()
		if err != nil {
			failures = append(failures, fmt.Sprintf("seq %d: %v", seq, err))
			mu.Unlock()
			return
		}
		if prev, dup := acked[seq]; dup {
			ackTwice = append(ackTwice, fmt.Sprintf("seq %d acknowledged at %d[%d] and %d[%d]", seq, prev.partition, prev.offset, r.Partition, r.Offset))
		}
		acked[seq] = ack{r.Partition, r.Offset}
		mu.Unlock()
		n := ackCount.Add(1)
		for _, at := range killAt {
			if n == at {
				reachedCh <- n
			}
		}
	}

	pctx, pcancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer pcancel()
	producerDone := make(chan struct{})
	go func() {
		defer close(producerDone)
		for seq := 0; seq < idemRecords; seq++ {
			p := int32(seq % idemPartitions)
			prod.Produce(pctx, &kgo.Record{
				Topic: topic, Partition: p,
				Key:   []byte(fmt.Sprintf("key-%d", p)),
				Value: []byte(fmt.Sprintf("idem-%08d", seq)),
			}, promise)
			sent.Add(1)
		}
	}()

	// A separate client to look at the log while the producer's answers are held.
	probe := kadm.NewClient(newClient(t, b, "probe"))
	logTotal := func() (int64, error) {
		lo, err := probe.ListEndOffsets(ctxTimeout(t, 5*time.Second), topic)
		if err == nil {
			err = lo.Error()
		}
		total := int64(0)
		lo.Each(func(o kadm.ListedOffset) { total += o.Offset })
		return total, err
	}

	start := time.Now()
	inLogUnacked := int64(0)
	for k := range killAt {
		select {
		case <-reachedCh:
		case <-time.After(90 * time.Second):
			t.Fatalf("kill %d: only %d of %d records acknowledged after 90 s", k+1, ackCount.Load(), idemRecords)
		}
		gate.hold()
		var inLog, a int64
		waitFor(t, 15*time.Second, fmt.Sprintf("kill %d: records in the log without an acknowledgement", k+1), func() (bool, string) {
			n, err := logTotal()
			if err != nil {
				return false, err.Error()
			}
			inLog, a = n, ackCount.Load()
			return inLog > a, fmt.Sprintf("log holds %d records, %d acknowledged, %d handed to the client", inLog, a, sent.Load())
		})
		written, answered := counts.get()
		b.Kill()
		gate.failHeldAndRelease()
		killed := time.Now()
		inLogUnacked += inLog - a
		t.Logf("kill %d: SIGKILLed the agent with %d records in the log of which %d acknowledged (%d unacknowledged, %d handed to the client); Produce requests written %d, answered %d",
			k+1, inLog, a, inLog-a, sent.Load(), written, answered)
		if err := b.Start(); err != nil {
			t.Fatalf("restart %d: %v", k+1, err)
		}
		t.Logf("kill %d: restarted and ready after %v", k+1, time.Since(killed).Round(time.Millisecond))
	}
	select {
	case <-producerDone:
	case <-pctx.Done():
		t.Fatalf("the producer could not hand over all records: %d of %d", sent.Load(), idemRecords)
	}
	if err := prod.Flush(pctx); err != nil {
		t.Fatalf("flush: %v; %d of %d acknowledged", err, ackCount.Load(), idemRecords)
	}
	t.Logf("all %d records acknowledged or failed after %v", idemRecords, time.Since(start).Round(time.Millisecond))

	mu.Lock()
	nAcked, nFailed := len(acked), len(failures)
	for i, f := range failures {
		if i == 10 {
			t.Errorf("... %d more failures", len(failures)-10)
			break
		}
		t.Errorf("produce failed: %s", f)
	}
	for _, s := range ackTwice {
		t.Errorf("%s", s)
	}
	if len(dataLoss) > 0 {
		t.Errorf("franz-go detected data loss on %v", dataLoss)
	}
	mu.Unlock()
	if nAcked != idemRecords {
		t.Errorf("%d of %d records acknowledged (%d failed)", nAcked, idemRecords, nFailed)
	}

	// Read everything back.
	end := endOffsets(t, adm, topic)
	total := int64(0)
	for _, e := range end {
		total += e
	}
	got := consumeN(t, b, topic, int(total), 60*time.Second)
	count := map[int]int{}
	lastSeq := map[int32]int{}
	atOffset := map[[2]int64]int{}
	perPartition := map[int32]int{}
	outOfOrder, foreign := 0, 0
	for _, r := range got {
		seq, err := strconv.Atoi(strings.TrimPrefix(string(r.Value), "idem-"))
		if err != nil || !strings.HasPrefix(string(r.Value), "idem-") {
			foreign++
			t.Errorf("unexpected record %q at %d[%d]", r.Value, r.Partition, r.Offset)
			continue
		}
		count[seq]++
		perPartition[r.Partition]++
		atOffset[[2]int64{int64(r.Partition), r.Offset}] = seq
		if int32(seq%idemPartitions) != r.Partition {
			t.Errorf("seq %d in partition %d", seq, r.Partition)
		}
		if prev, ok := lastSeq[r.Partition]; ok && seq <= prev {
			outOfOrder++
			if outOfOrder <= 10 {
				t.Errorf("partition %d: seq %d at offset %d after seq %d", r.Partition, seq, r.Offset, prev)
			}
		}
		lastSeq[r.Partition] = seq
	}
	dups, missing, misplaced := 0, 0, 0
	mu.Lock()
	for seq, a := range acked {
		switch n := count[seq]; {
		case n == 0:
			missing++
			if missing <= 10 {
				t.Errorf("acknowledged seq %d (at %d[%d]) is not in the log", seq, a.partition, a.offset)
			}
		case n > 1:
			dups++
			if dups <= 10 {
				t.Errorf("seq %d is in the log %d times", seq, n)
			}
		}
		if s, ok := atOffset[[2]int64{int64(a.partition), a.offset}]; !ok || s != seq {
			misplaced++
			if misplaced <= 10 {
				t.Errorf("seq %d acknowledged at %d[%d], where the log has seq %d (present %v)", seq, a.partition, a.offset, s, ok)
			}
		}
	}
	for seq, n := range count {
		if _, ok := acked[seq]; !ok && n > 1 {
			dups++
			t.Errorf("unacknowledged seq %d is in the log %d times", seq, n)
		}
	}
	mu.Unlock()
	written, answered := counts.get()
	t.Logf("idempotence: sent %d, acknowledged %d, failed %d; log holds %d records (end offsets %v, per partition %v); "+
		"duplicates %d, missing %d, misplaced %d, out of order %d, foreign %d; %d records were in the log unacknowledged at the crashes; "+
		"Produce requests written %d, answered %d; agent starts %d, exits %v",
		idemRecords, nAcked, nFailed, len(got), end, perPartition, dups, missing, misplaced, outOfOrder, foreign,
		inLogUnacked, written, answered, b.Starts(), b.Exits())
	if int(total) != idemRecords {
		t.Errorf("the log holds %d records, %d were produced", total, idemRecords)
	}
}

// produceCounts counts Produce requests written and Produce responses read.
type produceCounts struct{ written, answered atomic.Int64 }

func (c *produceCounts) get() (written, answered int64) { return c.written.Load(), c.answered.Load() }

func (c *produceCounts) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == 0 && err == nil {
		c.written.Add(1)
	}
}

func (c *produceCounts) OnBrokerRead(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == 0 && err == nil {
		c.answered.Add(1)
	}
}

var errLostInCrash = errors.New("test: connection failed with the broker's crash")

// responseGate wraps a client's connections. hold() stops Reads from returning
// (responses stay unread in the socket; a Read already in progress may still return
// one); failHeldAndRelease() makes every connection open at that time fail (so the
// responses it held are lost, as when the broker crashes before they are sent) and
// lets new connections work normally.
type responseGate struct {
	dialer func(ctx context.Context, network, host string) (net.Conn, error)
	mu     sync.Mutex
	cond   *sync.Cond
	held   bool
	epoch  int // connections from an older epoch are failed
}

func newResponseGate(dialer func(ctx context.Context, network, host string) (net.Conn, error)) *responseGate {
	g := &responseGate{dialer: dialer}
	g.cond = sync.NewCond(&g.mu)
	return g
}

func (g *responseGate) hold() {
	g.mu.Lock()
	g.held = true
	g.mu.Unlock()
}

func (g *responseGate) failHeldAndRelease() {
	g.mu.Lock()
	g.held = false
	g.epoch++
	g.cond.Broadcast()
	g.mu.Unlock()
}

func (g *responseGate) dial(ctx context.Context, network, host string) (net.Conn, error) {
	c, err := g.dialer(ctx, network, host)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return &gatedConn{Conn: c, g: g, epoch: g.epoch}, nil
}

type gatedConn struct {
	net.Conn
	g     *responseGate
	epoch int
}

// wait blocks while the gate is held; it fails once the connection's epoch is over.
func (c *gatedConn) wait() error {
	c.g.mu.Lock()
	defer c.g.mu.Unlock()
	for {
		if c.epoch != c.g.epoch {
			c.Conn.Close()
			return errLostInCrash
		}
		if !c.g.held {
			return nil
		}
		c.g.cond.Wait()
	}
}

func (c *gatedConn) Read(p []byte) (int, error) {
	if err := c.wait(); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

func (c *gatedConn) Write(p []byte) (int, error) {
	c.g.mu.Lock()
	stale := c.epoch != c.g.epoch
	c.g.mu.Unlock()
	if stale {
		c.Conn.Close()
		return 0, errLostInCrash
	}
	return c.Conn.Write(p)
}
