package stratago

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func errIs(err, want error) bool { return errors.Is(err, want) }

func describeTopicConfig(t *testing.T, adm *kadm.Client, topic, key string) kadm.Config {
	t.Helper()
	rcs, err := adm.DescribeTopicConfigs(ctxTimeout(t, 10*time.Second), topic)
	if err != nil {
		t.Fatalf("DescribeTopicConfigs %s: %v", topic, err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil || rc.Err != nil {
		t.Fatalf("DescribeTopicConfigs %s: %v / %v (%s)", topic, err, rc.Err, rc.ErrMessage)
	}
	for _, c := range rc.Configs {
		if c.Key == key {
			return c
		}
	}
	t.Fatalf("DescribeTopicConfigs %s: no %s among %d configs", topic, key, len(rc.Configs))
	return kadm.Config{}
}

func alterTopic(t *testing.T, adm *kadm.Client, topic string, cs ...kadm.AlterConfig) error {
	t.Helper()
	rs, err := adm.AlterTopicConfigs(ctxTimeout(t, 10*time.Second), cs, topic)
	if err != nil {
		t.Fatalf("AlterTopicConfigs %s: %v", topic, err)
	}
	r, err := rs.On(topic, nil)
	if err != nil {
		t.Fatalf("AlterTopicConfigs %s: no response for the topic: %v", topic, err)
	}
	if r.Err != nil {
		return fmt.Errorf("%w (%s)", r.Err, r.ErrMessage)
	}
	return nil
}

func topicNames(t *testing.T, adm *kadm.Client) map[string]kadm.TopicDetail {
	t.Helper()
	td, err := adm.ListTopics(freshMeta(ctxTimeout(t, 10*time.Second)))
	if err != nil {
		t.Fatalf("ListTopics: %v", err)
	}
	return td
}

// TestAdmin exercises kadm against one broker: topics, partitions, configs, groups,
// offsets, in that order (later steps use what earlier ones made).
func TestAdmin(t *testing.T) {
	b := StartBroker(t, "--group-initial-rebalance-delay-ms", groupInitialRebalanceDelayMs)
	adm := newAdmin(t, b)
	ctx := func() context.Context { return ctxTimeout(t, 20*time.Second) }
	t1, t2, t3, t4 := uniqueName("go-adm-a"), uniqueName("go-adm-b"), uniqueName("go-adm-validate"), uniqueName("go-adm-defaults")
	var t1ID kadm.TopicID

	t.Run("CreateTopics", func(t *testing.T) {
		rs, err := adm.CreateTopics(ctx(), 3, 1, map[string]*string{
			"retention.ms":      kadm.StringPtr("3600000"),
			"max.message.bytes": kadm.StringPtr("2000000"),
		}, t1, t2)
		if err != nil {
			t.Fatalf("CreateTopics: %v", err)
		}
		for _, name := range []string{t1, t2} {
			r, err := rs.On(name, nil)
			if err != nil || r.Err != nil {
				t.Fatalf("CreateTopics %s: %v / %v (%s)", name, err, r.Err, r.ErrMessage)
			}
			if r.NumPartitions != 3 || r.ReplicationFactor != 1 {
				t.Errorf("CreateTopics %s: %d partitions, replication factor %d; expected 3, 1", name, r.NumPartitions, r.ReplicationFactor)
			}
			if r.ID == (kadm.TopicID{}) {
				t.Errorf("CreateTopics %s: no topic id", name)
			}
			if c, ok := r.Configs["retention.ms"]; !ok || c.MaybeValue() != "3600000" {
				t.Errorf("CreateTopics %s: returned retention.ms %+v, expected 3600000", name, c)
			}
		}
		t1ID = rs[t1].ID
		waitForLeaders(t, adm, t1, 3)
		waitForLeaders(t, adm, t2, 3)

		// Broker defaults (-1, -1).
		r, err := adm.CreateTopic(ctx(), -1, -1, nil, t4)
		if err != nil {
			t.Errorf("CreateTopic %s with broker defaults: %v (%s)", t4, err, r.ErrMessage)
		} else if r.NumPartitions < 1 || r.ReplicationFactor != 1 {
			t.Errorf("CreateTopic %s with defaults: %d partitions, replication factor %d", t4, r.NumPartitions, r.ReplicationFactor)
		}

		// validate_only creates nothing.
		vr, err := adm.ValidateCreateTopics(ctx(), 2, 1, nil, t3)
		if err != nil || vr[t3].Err != nil {
			t.Errorf("ValidateCreateTopics %s: %v / %v", t3, err, vr[t3].Err)
		}

		// Invalid requests: the error Kafka gives.
		for _, c := range []struct {
			name    string
			topic   string
			parts   int32
			rf      int16
			configs map[string]*string
			want    error
		}{
			{"bad config value", uniqueName("go-adm-badval"), 1, 1, map[string]*string{"retention.ms": kadm.StringPtr("forever")}, kerr.InvalidConfig},
			{"unknown config", uniqueName("go-adm-unkcfg"), 1, 1, map[string]*string{"no.such.config": kadm.StringPtr("1")}, kerr.InvalidConfig},
			{"bad cleanup.policy", uniqueName("go-adm-badpol"), 1, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("shred")}, kerr.InvalidConfig},
			{"invalid name", "bad name!", 1, 1, nil, kerr.InvalidTopicException},
			{"name too long", strings.Repeat("x", 250), 1, 1, nil, kerr.InvalidTopicException},
			{"zero partitions", uniqueName("go-adm-zero"), 0, 1, nil, kerr.InvalidPartitions},
			{"replication factor above broker count", uniqueName("go-adm-rf"), 1, 3, nil, kerr.InvalidReplicationFactor},
			{"already exists", t1, 5, 1, nil, kerr.TopicAlreadyExists},
		} {
			r, err := adm.CreateTopic(ctx(), c.parts, c.rf, c.configs, c.topic)
			if !errIs(err, c.want) {
				t.Errorf("CreateTopic (%s): got %v (%s), expected %v", c.name, err, r.ErrMessage, c.want)
			}
		}
		td := topicNames(t, adm)
		for name := range td {
			if name == t3 || strings.HasPrefix(name, "go-adm-bad") || strings.HasPrefix(name, "go-adm-unk") ||
				strings.HasPrefix(name, "go-adm-zero") || strings.HasPrefix(name, "go-adm-rf") || name == "bad name!" {
				t.Errorf("topic %s exists after a failed or validate-only creation", name)
			}
		}
		if n := len(td[t1].Partitions); n != 3 {
			t.Errorf("%s has %d partitions after the duplicate creation, expected 3", t1, n)
		}
	})

	t.Run("ListTopicsAndMetadata", func(t *testing.T) {
		td := topicNames(t, adm)
		for name, n := range map[string]int{t1: 3, t2: 3} {
			if d, ok := td[name]; !ok {
				t.Errorf("ListTopics: %s missing", name)
			} else if len(d.Partitions) != n || d.IsInternal {
				t.Errorf("ListTopics %s: %d partitions, internal %v", name, len(d.Partitions), d.IsInternal)
			}
		}
		for name, d := range td {
			if d.IsInternal {
				t.Errorf("ListTopics returned internal topic %s", name)
			}
		}

		m, err := adm.Metadata(freshMeta(ctx()))
		if err != nil {
			t.Fatalf("Metadata: %v", err)
		}
		if len(m.Brokers) != 1 {
			t.Fatalf("Metadata: brokers %+v, expected one", m.Brokers)
		}
		br := m.Brokers[0]
		if br.Host != "127.0.0.1" || br.Port != int32(b.KafkaPort) {
			t.Errorf("Metadata: broker %+v, expected 127.0.0.1:%d", br, b.KafkaPort)
		}
		if m.Controller != br.NodeID {
			t.Errorf("Metadata: controller %d, broker %d", m.Controller, br.NodeID)
		}
		if m.Cluster == "" {
			t.Errorf("Metadata: no cluster id")
		}
		d := m.Topics[t1]
		if d.ID != t1ID {
			t.Errorf("Metadata: %s id %v, CreateTopics said %v", t1, d.ID, t1ID)
		}
		for _, p := range d.Partitions.Sorted() {
			if p.Err != nil || p.Leader != br.NodeID || fmt.Sprint(p.Replicas) != fmt.Sprint([]int32{br.NodeID}) ||
				fmt.Sprint(p.ISR) != fmt.Sprint([]int32{br.NodeID}) || p.LeaderEpoch < 0 || len(p.OfflineReplicas) != 0 {
				t.Errorf("Metadata %s[%d]: %+v", t1, p.Partition, p)
			}
		}

		// An unknown topic: UNKNOWN_TOPIC_OR_PARTITION, and not created (kadm asks
		// without allow_auto_topic_creation).
		unknown := uniqueName("go-adm-unknown")
		m, err = adm.Metadata(freshMeta(ctx()), unknown)
		if err != nil {
			t.Fatalf("Metadata %s: %v", unknown, err)
		}
		if !errIs(m.Topics[unknown].Err, kerr.UnknownTopicOrPartition) {
			t.Errorf("Metadata %s: %+v, expected UNKNOWN_TOPIC_OR_PARTITION", unknown, m.Topics[unknown])
		}
		if _, ok := topicNames(t, adm)[unknown]; ok {
			t.Errorf("Metadata without allow_auto_topic_creation created %s", unknown)
		}
	})

	t.Run("CreatePartitions", func(t *testing.T) {
		rs, err := adm.CreatePartitions(ctx(), 2, t1)
		if err != nil || rs[t1].Err != nil {
			t.Fatalf("CreatePartitions %s +2: %v / %v (%s)", t1, err, rs[t1].Err, rs[t1].ErrMessage)
		}
		waitForLeaders(t, adm, t1, 5)
		for _, c := range []struct {
			set  int
			want error
		}{{2, kerr.InvalidPartitions}, {5, kerr.InvalidPartitions}} {
			rs, err := adm.UpdatePartitions(ctx(), c.set, t1)
			if err != nil {
				t.Fatalf("UpdatePartitions %s to %d: %v", t1, c.set, err)
			}
			if !errIs(rs[t1].Err, c.want) {
				t.Errorf("UpdatePartitions %s to %d: %v (%s), expected %v", t1, c.set, rs[t1].Err, rs[t1].ErrMessage, c.want)
			}
		}
		unknown := uniqueName("go-adm-nope")
		rs, err = adm.UpdatePartitions(ctx(), 3, unknown)
		if err != nil {
			t.Fatalf("UpdatePartitions %s: %v", unknown, err)
		}
		if !errIs(rs[unknown].Err, kerr.UnknownTopicOrPartition) {
			t.Errorf("UpdatePartitions of unknown topic: %v, expected UNKNOWN_TOPIC_OR_PARTITION", rs[unknown].Err)
		}
		if n := len(topicNames(t, adm)[t1].Partitions); n != 5 {
			t.Errorf("%s has %d partitions, expected 5", t1, n)
		}
	})

	t.Run("DescribeTopicConfigs", func(t *testing.T) {
		c := describeTopicConfig(t, adm, t1, "retention.ms")
		if c.MaybeValue() != "3600000" || c.Source != kmsg.ConfigSourceDynamicTopicConfig {
			t.Errorf("%s retention.ms: %q from %v, expected 3600000 from DYNAMIC_TOPIC_CONFIG", t1, c.MaybeValue(), c.Source)
		}
		if len(c.Synonyms) == 0 || c.Synonyms[0].Source != kmsg.ConfigSourceDynamicTopicConfig {
			t.Errorf("%s retention.ms synonyms %+v, expected the topic's value first", t1, c.Synonyms)
		}
		c = describeTopicConfig(t, adm, t1, "cleanup.policy")
		if c.MaybeValue() != "delete" || (c.Source != kmsg.ConfigSourceDefaultConfig && c.Source != kmsg.ConfigSourceStaticBrokerConfig) {
			t.Errorf("%s cleanup.policy: %q from %v, expected the default delete", t1, c.MaybeValue(), c.Source)
		}
		unknown := uniqueName("go-adm-nope")
		rcs, err := adm.DescribeTopicConfigs(ctx(), unknown)
		rc, _ := rcs.On(unknown, nil)
		if err == nil && !errIs(rc.Err, kerr.UnknownTopicOrPartition) {
			t.Errorf("DescribeTopicConfigs of unknown topic: %v / %+v, expected UNKNOWN_TOPIC_OR_PARTITION", err, rc)
		} else if err != nil && !errIs(err, kerr.UnknownTopicOrPartition) {
			t.Errorf("DescribeTopicConfigs of unknown topic: %v, expected UNKNOWN_TOPIC_OR_PARTITION", err)
		}
	})

	t.Run("AlterTopicConfigs", func(t *testing.T) {
		if err := alterTopic(t, adm, t1,
			kadm.AlterConfig{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("7200000")},
			kadm.AlterConfig{Op: kadm.SetConfig, Name: "segment.ms", Value: kadm.StringPtr("600000")},
		); err != nil {
			t.Fatalf("incremental SET: %v", err)
		}
		for k, v := range map[string]string{"retention.ms": "7200000", "segment.ms": "600000", "max.message.bytes": "2000000"} {
			c := describeTopicConfig(t, adm, t1, k)
			if c.MaybeValue() != v || c.Source != kmsg.ConfigSourceDynamicTopicConfig {
				t.Errorf("after SET, %s = %q from %v, expected %s from DYNAMIC_TOPIC_CONFIG", k, c.MaybeValue(), c.Source, v)
			}
		}
		if err := alterTopic(t, adm, t1, kadm.AlterConfig{Op: kadm.AppendConfig, Name: "cleanup.policy", Value: kadm.StringPtr("compact")}); err != nil {
			t.Errorf("APPEND cleanup.policy compact: %v", err)
		} else if v := configValue(t, adm, t1, "cleanup.policy"); v != "delete,compact" {
			t.Errorf("after APPEND, cleanup.policy = %q, expected delete,compact", v)
		}
		if err := alterTopic(t, adm, t1, kadm.AlterConfig{Op: kadm.SubtractConfig, Name: "cleanup.policy", Value: kadm.StringPtr("delete")}); err != nil {
			t.Errorf("SUBTRACT cleanup.policy delete: %v", err)
		} else if v := configValue(t, adm, t1, "cleanup.policy"); v != "compact" {
			t.Errorf("after SUBTRACT, cleanup.policy = %q, expected compact", v)
		}
		// A compacted topic takes no record without a key (INVALID_RECORD).
		kp := newClient(t, b, "adm-keyless", kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err := kp.ProduceSync(ctx(), &kgo.Record{Topic: t1, Partition: 0, Value: []byte("no key")}).FirstErr(); !errIs(err, kerr.InvalidRecord) {
			t.Errorf("keyless record to the compacted %s: %v, expected INVALID_RECORD", t1, err)
		}
		kp.Close()
		if err := alterTopic(t, adm, t1, kadm.AlterConfig{Op: kadm.SetConfig, Name: "cleanup.policy", Value: kadm.StringPtr("delete")}); err != nil {
			t.Errorf("SET cleanup.policy delete: %v", err)
		} else if v := configValue(t, adm, t1, "cleanup.policy"); v != "delete" {
			t.Errorf("after SET, cleanup.policy = %q, expected delete", v)
		}
		if err := alterTopic(t, adm, t1, kadm.AlterConfig{Op: kadm.DeleteConfig, Name: "retention.ms"}); err != nil {
			t.Errorf("DELETE retention.ms: %v", err)
		} else if c := describeTopicConfig(t, adm, t1, "retention.ms"); c.MaybeValue() != "604800000" || c.Source == kmsg.ConfigSourceDynamicTopicConfig {
			t.Errorf("after DELETE, retention.ms = %q from %v, expected the default 604800000", c.MaybeValue(), c.Source)
		}
		// Invalid: the error, and nothing changed.
		if err := alterTopic(t, adm, t1, kadm.AlterConfig{Op: kadm.SetConfig, Name: "segment.ms", Value: kadm.StringPtr("abc")}); !errIs(err, kerr.InvalidConfig) {
			t.Errorf("SET segment.ms=abc: %v, expected INVALID_CONFIG", err)
		}
		if err := alterTopic(t, adm, t1, kadm.AlterConfig{Op: kadm.SetConfig, Name: "no.such.config", Value: kadm.StringPtr("1")}); !errIs(err, kerr.InvalidConfig) {
			t.Errorf("SET no.such.config: %v, expected INVALID_CONFIG", err)
		}
		if err := alterTopic(t, adm, t1, kadm.AlterConfig{Op: kadm.AppendConfig, Name: "segment.ms", Value: kadm.StringPtr("1")}); !errIs(err, kerr.InvalidConfig) {
			t.Errorf("APPEND to the non-list segment.ms: %v, expected INVALID_CONFIG", err)
		}
		if v := configValue(t, adm, t1, "segment.ms"); v != "600000" {
			t.Errorf("segment.ms = %q after failed alters, expected 600000", v)
		}
		// validate_only changes nothing.
		vrs, err := adm.ValidateAlterTopicConfigs(ctx(), []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "segment.ms", Value: kadm.StringPtr("1234567")}}, t1)
		if err != nil || vrs[0].Err != nil {
			t.Errorf("ValidateAlterTopicConfigs: %v / %+v", err, vrs)
		}
		if v := configValue(t, adm, t1, "segment.ms"); v != "600000" {
			t.Errorf("segment.ms = %q after validate-only alter, expected 600000", v)
		}
		unknown := uniqueName("go-adm-nope")
		rs, err := adm.AlterTopicConfigs(ctx(), []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "segment.ms", Value: kadm.StringPtr("600000")}}, unknown)
		r, _ := rs.On(unknown, nil)
		if !errIs(err, kerr.UnknownTopicOrPartition) && !errIs(r.Err, kerr.UnknownTopicOrPartition) {
			t.Errorf("AlterTopicConfigs of unknown topic: %v / %+v, expected UNKNOWN_TOPIC_OR_PARTITION", err, r)
		}
	})

	// Records for the group and offset steps: 20 to each of t1's 5 partitions, with
	// timestamps base + 1 s * i.
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	prod := newClient(t, b, "adm-producer", kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var recs []*kgo.Record
	for i := 0; i < 100; i++ {
		recs = append(recs, &kgo.Record{Topic: t1, Partition: int32(i % 5), Key: []byte(fmt.Sprint("k", i)), Value: []byte(fmt.Sprint(i)), Timestamp: base.Add(time.Duration(i) * time.Second)})
	}
	if err := prod.ProduceSync(ctxTimeout(t, 30*time.Second), recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}

	t.Run("ListOffsets", func(t *testing.T) {
		so, err := adm.ListStartOffsets(ctx(), t1, t2)
		if err != nil || so.Error() != nil {
			t.Fatalf("ListStartOffsets: %v / %v", err, so.Error())
		}
		eo, err := adm.ListEndOffsets(ctx(), t1, t2)
		if err != nil || eo.Error() != nil {
			t.Fatalf("ListEndOffsets: %v / %v", err, eo.Error())
		}
		for topic, parts := range map[string]int32{t1: 5, t2: 3} {
			for p := int32(0); p < parts; p++ {
				want := int64(0)
				if topic == t1 {
					want = 20
				}
				if s, ok := so.Lookup(topic, p); !ok || s.Offset != 0 {
					t.Errorf("start offset of %s[%d]: %+v, expected 0", topic, p, s)
				}
				if e, ok := eo.Lookup(topic, p); !ok || e.Offset != want {
					t.Errorf("end offset of %s[%d]: %+v, expected %d", topic, p, e, want)
				}
			}
		}
		// By timestamp: partition p holds i = p, p+5, ...; the first record at or
		// after base+52.5 s in partition 3 is i = 53 (offset 10).
		ao, err := adm.ListOffsetsAfterMilli(ctx(), base.Add(52500*time.Millisecond).UnixMilli(), t1)
		if err != nil || ao.Error() != nil {
			t.Fatalf("ListOffsetsAfterMilli: %v / %v", err, ao.Error())
		}
		if o, _ := ao.Lookup(t1, 3); o.Offset != 10 || o.Timestamp != base.Add(53*time.Second).UnixMilli() {
			t.Errorf("offset after base+52.5s in %s[3]: %+v, expected offset 10 at %d", t1, o, base.Add(53*time.Second).UnixMilli())
		}
		if o, _ := ao.Lookup(t1, 0); o.Offset != 11 {
			t.Errorf("offset after base+52.5s in %s[0]: %+v, expected 11", t1, o)
		}
		mo, err := adm.ListMaxTimestampOffsets(ctx(), t1)
		if err != nil || mo.Error() != nil {
			t.Fatalf("ListMaxTimestampOffsets: %v / %v", err, mo.Error())
		}
		if o, _ := mo.Lookup(t1, 4); o.Offset != 19 || o.Timestamp != base.Add(99*time.Second).UnixMilli() {
			t.Errorf("max timestamp offset of %s[4]: %+v, expected offset 19 at %d", t1, o, base.Add(99*time.Second).UnixMilli())
		}
	})

	group, simpleGroup := uniqueName("go-adm-group"), uniqueName("go-adm-simple")
	t.Run("Groups", func(t *testing.T) {
		cl := newClient(t, b, "adm-member",
			kgo.ConsumerGroup(group), kgo.ConsumeTopics(t1), kgo.DisableAutoCommit(),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		got := 0
		pctx := ctxTimeout(t, 30*time.Second)
		for got < 100 {
			fs := cl.PollFetches(pctx)
			if pctx.Err() != nil {
				t.Fatalf("group member consumed %d of 100 records", got)
			}
			fs.EachError(func(tp string, p int32, err error) { t.Errorf("fetch %s[%d]: %v", tp, p, err) })
			got += fs.NumRecords()
		}
		if err := cl.CommitUncommittedOffsets(ctx()); err != nil {
			t.Fatalf("commit: %v", err)
		}

		// While the member is in the group.
		lg, err := adm.ListGroups(ctx())
		if err != nil {
			t.Fatalf("ListGroups: %v", err)
		}
		if g, ok := lg[group]; !ok || g.ProtocolType != "consumer" || g.State != "Stable" {
			t.Errorf("ListGroups: %s is %+v, expected a Stable consumer group", group, g)
		}
		if lg, err := adm.ListGroups(ctx(), "Empty"); err != nil {
			t.Errorf("ListGroups Empty: %v", err)
		} else if _, ok := lg[group]; ok {
			t.Errorf("ListGroups filtered on Empty lists the Stable %s", group)
		}
		dg, err := adm.DescribeGroups(ctx(), group)
		if err != nil {
			t.Fatalf("DescribeGroups: %v", err)
		}
		d := dg[group]
		if d.Err != nil || d.State != "Stable" || d.ProtocolType != "consumer" || len(d.Members) != 1 {
			t.Fatalf("DescribeGroups %s: %+v", group, d)
		}
		if d.Protocol != "cooperative-sticky" { // franz-go's default balancer
			t.Errorf("DescribeGroups %s: protocol %q, expected cooperative-sticky", group, d.Protocol)
		}
		if mm := d.Members[0]; mm.ClientID != "strata-go-adm-member" || mm.MemberID == "" || mm.ClientHost == "" {
			t.Errorf("DescribeGroups member %+v", mm)
		}
		if jt := d.JoinTopics(); fmt.Sprint(jt) != fmt.Sprint([]string{t1}) {
			t.Errorf("DescribeGroups: member subscribed to %v, expected [%s]", jt, t1)
		}
		if ap := d.AssignedPartitions()[t1]; len(ap) != 5 {
			t.Errorf("DescribeGroups: assigned %v of %s, expected all 5 partitions", ap, t1)
		}
		if dr, err := adm.DeleteGroups(ctx(), group); err != nil || !errIs(dr[group].Err, kerr.NonEmptyGroup) {
			t.Errorf("DeleteGroups of a group with a member: %v / %v, expected NON_EMPTY_GROUP", err, dr[group].Err)
		}

		cl.Close() // leaves the group
		waitFor(t, 15*time.Second, group+" to be Empty", func() (bool, string) {
			lg, err := adm.ListGroups(ctx())
			if err != nil {
				return false, err.Error()
			}
			return lg[group].State == "Empty", fmt.Sprintf("%+v", lg[group])
		})
		os, err := adm.FetchOffsets(ctx(), group)
		if err != nil || os.Error() != nil {
			t.Fatalf("FetchOffsets %s: %v / %v", group, err, os.Error())
		}
		for p := int32(0); p < 5; p++ {
			if o, ok := os.Lookup(t1, p); !ok || o.At != 20 {
				t.Errorf("FetchOffsets %s %s[%d]: %+v, expected 20", group, t1, p, o)
			}
		}

		// A commit outside any generation (a "simple" group, as kadm's CommitOffsets).
		var off kadm.Offsets
		off.AddOffset(t1, 0, 7, -1)
		off.AddOffset(t1, 1, 9, -1)
		if err := adm.CommitAllOffsets(ctx(), simpleGroup, off); err != nil {
			t.Fatalf("CommitAllOffsets %s: %v", simpleGroup, err)
		}
		os, err = adm.FetchOffsets(ctx(), simpleGroup)
		if err != nil || os.Error() != nil {
			t.Fatalf("FetchOffsets %s: %v / %v", simpleGroup, err, os.Error())
		}
		if o0, _ := os.Lookup(t1, 0); o0.At != 7 {
			t.Errorf("FetchOffsets %s: %+v, expected 7", simpleGroup, o0)
		}
		if o1, _ := os.Lookup(t1, 1); o1.At != 9 {
			t.Errorf("FetchOffsets %s: %+v, expected 9", simpleGroup, o1)
		}
		if _, ok := os.Lookup(t1, 2); ok {
			t.Errorf("FetchOffsets %s: an offset for partition 2, which was never committed", simpleGroup)
		}
		lg, err = adm.ListGroups(ctx())
		if err != nil {
			t.Fatalf("ListGroups: %v", err)
		}
		if _, ok := lg[simpleGroup]; !ok {
			t.Errorf("ListGroups: %s (offsets only) missing: %v", simpleGroup, lg.Groups())
		}

		dr, err := adm.DeleteGroups(ctx(), group, simpleGroup)
		if err != nil || dr.Error() != nil {
			t.Fatalf("DeleteGroups: %v / %v", err, dr.Error())
		}
		lg, err = adm.ListGroups(ctx())
		if err != nil {
			t.Fatalf("ListGroups: %v", err)
		}
		for _, g := range []string{group, simpleGroup} {
			if _, ok := lg[g]; ok {
				t.Errorf("ListGroups: deleted %s still listed", g)
			}
		}
		dg, err = adm.DescribeGroups(ctx(), group)
		if err == nil {
			if d := dg[group]; !(d.State == "Dead" && d.Err == nil) && !errIs(d.Err, kerr.GroupIDNotFound) {
				t.Errorf("DescribeGroups of a deleted group: %+v, expected Dead or GROUP_ID_NOT_FOUND", d)
			}
		} else if !errIs(err, kerr.GroupIDNotFound) {
			t.Errorf("DescribeGroups of a deleted group: %v", err)
		}
		os, err = adm.FetchOffsets(ctx(), group)
		if err != nil {
			t.Errorf("FetchOffsets of a deleted group: %v", err)
		} else if len(os) != 0 {
			t.Errorf("FetchOffsets of a deleted group: %v, expected nothing", os)
		}
		if dr, err := adm.DeleteGroups(ctx(), group); err != nil || !errIs(dr[group].Err, kerr.GroupIDNotFound) {
			t.Errorf("DeleteGroups of a deleted group: %v / %v, expected GROUP_ID_NOT_FOUND", err, dr[group].Err)
		}
	})

	t.Run("DeleteTopics", func(t *testing.T) {
		oldID := topicNames(t, adm)[t2].ID
		rs, err := adm.DeleteTopics(ctx(), t2, t4)
		if err != nil || rs.Error() != nil {
			t.Fatalf("DeleteTopics: %v / %v", err, rs.Error())
		}
		waitFor(t, 15*time.Second, "deleted topics to disappear", func() (bool, string) {
			td := topicNames(t, adm)
			_, a := td[t2]
			_, c := td[t4]
			return !a && !c, fmt.Sprintf("%s listed %v, %s listed %v", t2, a, t4, c)
		})
		if _, ok := topicNames(t, adm)[t1]; !ok {
			t.Errorf("%s disappeared with the others", t1)
		}
		if _, err := adm.DeleteTopic(ctx(), t2); !errIs(err, kerr.UnknownTopicOrPartition) {
			t.Errorf("DeleteTopic of a deleted topic: %v, expected UNKNOWN_TOPIC_OR_PARTITION", err)
		}
		// The name can be used again: a new topic, a new id, empty.
		r, err := adm.CreateTopic(ctx(), 2, 1, nil, t2)
		if err != nil {
			t.Fatalf("re-creating %s: %v (%s)", t2, err, r.ErrMessage)
		}
		if r.ID == oldID {
			t.Errorf("re-created %s has the deleted topic's id %v", t2, oldID)
		}
		waitForLeaders(t, adm, t2, 2)
		if eo := endOffsets(t, adm, t2); eo[0] != 0 || eo[1] != 0 {
			t.Errorf("re-created %s end offsets %v, expected 0", t2, eo)
		}
	})
}

func configValue(t *testing.T, adm *kadm.Client, topic, key string) string {
	t.Helper()
	c := describeTopicConfig(t, adm, topic, key)
	return c.MaybeValue()
}
