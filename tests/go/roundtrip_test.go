package stratago

import (
	"bytes"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

var codecs = []struct {
	name  string
	codec kgo.CompressionCodec
	attr  uint8 // RecordAttrs.CompressionType() of a batch compressed with it
}{
	{"none", kgo.NoCompression(), 0},
	{"gzip", kgo.GzipCompression(), 1},
	{"snappy", kgo.SnappyCompression(), 2},
	{"lz4", kgo.Lz4Compression(), 3},
	{"zstd", kgo.ZstdCompression(), 4},
}

const (
	rtPartitions = 4
	rtRecords    = 2000
)

// roundTripRecords: keys (some null), values (compressible, some empty, one large and
// incompressible), headers (none, one, three with a null value), explicit partitions
// and timestamps.
func roundTripRecords(topic string, base time.Time) []*kgo.Record {
	rng := rand.New(rand.NewSource(42))
	big := make([]byte, 256*1024)
	rng.Read(big)
	recs := make([]*kgo.Record, 0, rtRecords+1)
	for i := 0; i < rtRecords; i++ {
		r := &kgo.Record{
			Topic:     topic,
			Partition: int32(i % rtPartitions),
			Timestamp: base.Add(time.Duration(i) * time.Millisecond),
		}
		if i%50 != 0 {
			r.Key = []byte(fmt.Sprintf("key-%05d", i))
		}
		if i%77 == 0 {
			r.Value = []byte{}
		} else {
			r.Value = []byte(fmt.Sprintf("value-%06d|%s", i, strings.Repeat("lorem ipsum dolor ", 5+i%7)))
		}
		switch i % 3 {
		case 1:
			r.Headers = []kgo.RecordHeader{{Key: "h", Value: []byte(fmt.Sprintf("v-%d", i))}}
		case 2:
			r.Headers = []kgo.RecordHeader{
				{Key: "h", Value: []byte("v")},
				{Key: "trace-id", Value: []byte(fmt.Sprintf("%016x", i))},
				{Key: "null-valued", Value: nil},
			}
		}
		recs = append(recs, r)
	}
	recs = append(recs, &kgo.Record{
		Topic: topic, Partition: 1, Key: []byte("big"), Value: big,
		Timestamp: base.Add(rtRecords * time.Millisecond),
	})
	return recs
}

func sameRecord(want, got *kgo.Record) string {
	var diffs []string
	if (want.Key == nil) != (got.Key == nil) || !bytes.Equal(want.Key, got.Key) {
		diffs = append(diffs, fmt.Sprintf("key %q (nil %v) != %q (nil %v)", got.Key, got.Key == nil, want.Key, want.Key == nil))
	}
	if (want.Value == nil) != (got.Value == nil) || !bytes.Equal(want.Value, got.Value) {
		diffs = append(diffs, fmt.Sprintf("value of %d bytes (nil %v) != %d bytes (nil %v)", len(got.Value), got.Value == nil, len(want.Value), want.Value == nil))
	}
	if !got.Timestamp.Equal(want.Timestamp.Truncate(time.Millisecond)) {
		diffs = append(diffs, fmt.Sprintf("timestamp %v != %v", got.Timestamp, want.Timestamp))
	}
	if got.Attrs.TimestampType() != 0 {
		diffs = append(diffs, fmt.Sprintf("timestamp type %d, expected 0 (CreateTime)", got.Attrs.TimestampType()))
	}
	if len(want.Headers) != len(got.Headers) {
		diffs = append(diffs, fmt.Sprintf("%d headers != %d", len(got.Headers), len(want.Headers)))
	} else {
		for i := range want.Headers {
			w, g := want.Headers[i], got.Headers[i]
			if w.Key != g.Key || (w.Value == nil) != (g.Value == nil) || !bytes.Equal(w.Value, g.Value) {
				diffs = append(diffs, fmt.Sprintf("header %d %q=%q (nil %v) != %q=%q (nil %v)", i, g.Key, g.Value, g.Value == nil, w.Key, w.Value, w.Value == nil))
			}
		}
	}
	return strings.Join(diffs, "; ")
}

// TestProduceConsumeRoundTrip produces records with every field set (and unset) to
// several partitions with each compression codec, then reads every one back.
func TestProduceConsumeRoundTrip(t *testing.T) {
	b := StartBroker(t)
	adm := newAdmin(t, b)
	for _, c := range codecs {
		t.Run(c.name, func(t *testing.T) {
			topic := uniqueName("go-rt-" + c.name)
			createTopic(t, adm, topic, rtPartitions, nil)
			prod := newClient(t, b, "producer-"+c.name,
				kgo.RecordPartitioner(kgo.ManualPartitioner()),
				kgo.RequiredAcks(kgo.AllISRAcks()),
				kgo.ProducerBatchCompression(c.codec),
				kgo.ProducerLinger(5*time.Millisecond),
			)
			recs := roundTripRecords(topic, time.Now().Add(-time.Hour).Truncate(time.Millisecond))
			t0 := time.Now()
			results := prod.ProduceSync(ctxTimeout(t, 60*time.Second), recs...)
			if err := results.FirstErr(); err != nil {
				t.Fatalf("produce: %v", err)
			}

			// Offsets are dense per partition, in the order produced.
			next := map[int32]int64{}
			byPos := map[[2]int64]*kgo.Record{}
			for i, r := range recs {
				if r.Offset != next[r.Partition] {
					t.Fatalf("record %d acknowledged at %d[%d], expected offset %d", i, r.Partition, r.Offset, next[r.Partition])
				}
				next[r.Partition]++
				byPos[[2]int64{int64(r.Partition), r.Offset}] = r
			}
			if end := endOffsets(t, adm, topic); fmt.Sprint(end) != fmt.Sprint(next) {
				t.Errorf("ListEndOffsets %v, expected %v", end, next)
			}

			produced := time.Since(t0)
			t0 = time.Now()
			got := consumeN(t, b, topic, len(recs), 60*time.Second)
			read := time.Since(t0)
			seen := map[[2]int64]bool{}
			lastOff := map[int32]int64{}
			compressed := 0
			for _, g := range got {
				pos := [2]int64{int64(g.Partition), g.Offset}
				want, ok := byPos[pos]
				if !ok {
					t.Errorf("consumed a record at %d[%d] that was not produced", g.Partition, g.Offset)
					continue
				}
				if seen[pos] {
					t.Errorf("record at %d[%d] consumed twice", g.Partition, g.Offset)
				}
				seen[pos] = true
				if prev, ok := lastOff[g.Partition]; ok && g.Offset != prev+1 {
					t.Errorf("partition %d: offset %d follows %d", g.Partition, g.Offset, prev)
				} else if !ok && g.Offset != 0 {
					t.Errorf("partition %d: first record at offset %d", g.Partition, g.Offset)
				}
				lastOff[g.Partition] = g.Offset
				if d := sameRecord(want, g); d != "" {
					t.Errorf("record at %d[%d]: %s", g.Partition, g.Offset, d)
				}
				ct := g.Attrs.CompressionType()
				if ct != 0 && ct != c.attr {
					t.Errorf("record at %d[%d] in a batch compressed with %d, produced with %s", g.Partition, g.Offset, ct, c.name)
				}
				if ct == c.attr && ct != 0 {
					compressed++
				}
			}
			if len(seen) != len(recs) {
				t.Errorf("read back %d distinct records, produced %d", len(seen), len(recs))
			}
			if c.attr != 0 && compressed == 0 {
				t.Errorf("no record came back in a %s-compressed batch", c.name)
			}
			t.Logf("%s: produced %d records to %d partitions in %v, read back %d in %v (%d in %s batches)",
				topic, len(recs), rtPartitions, produced.Round(time.Millisecond), len(got), read.Round(time.Millisecond), compressed, c.name)
		})
	}
}
