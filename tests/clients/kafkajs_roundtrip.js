#!/usr/bin/env node
// kafkajs side of test_kafkajs.py.
//
//   node kafkajs_roundtrip.js <bootstrap host:port> <topic prefix> <output.json>
//
// For every codec kafkajs can use here: creates a 2-partition topic (admin), produces
// keyed records with headers, null keys and null values (acks -1, idempotent false) in
// two sends, and records what it sent with the offsets kafkajs reported (baseOffset of
// the partition's batch + index). Then it asks admin for the partition offsets (latest
// and by timestamp) and reads every partition back through kafkajs' own Fetch
// implementation (cluster/broker API; kafkajs has no group-less consumer). Writes one
// JSON document to <output.json>; logs go to stderr. Exit code 0 iff nothing threw.
'use strict'

const fs = require('fs')
const {
  Kafka,
  logLevel,
  CompressionTypes,
  CompressionCodecs,
  Partitioners,
} = require('kafkajs')

const [bootstrap, prefix, outPath] = process.argv.slice(2)
if (!bootstrap || !prefix || !outPath) {
  console.error('usage: kafkajs_roundtrip.js <bootstrap> <topic-prefix> <out.json>')
  process.exit(2)
}

const BASE_TS = 1700000000000
const PER_PARTITION_PER_SEND = 25
const PARTITIONS = 2
const DEADLINE_MS = 60000
const started = Date.now()

const codecStatus = { none: { ok: true }, gzip: { ok: true } }

function tryRegister(name, type, makeCodec) {
  try {
    CompressionCodecs[type] = makeCodec()
    codecStatus[name] = { ok: true }
  } catch (e) {
    codecStatus[name] = { ok: false, error: String(e && e.stack ? e.stack : e) }
  }
}

tryRegister('snappy', CompressionTypes.Snappy, () => require('kafkajs-snappy'))
tryRegister('lz4', CompressionTypes.LZ4, () => {
  const LZ4Codec = require('kafkajs-lz4')
  return new LZ4Codec().codec
})
// @kafkajs/zstd needs a native addon (cppzst) that does not build on node 20, so
// zstd uses zstd-codec (zstd compiled to JS with emscripten) behind kafkajs' codec API.
tryRegister('zstd', CompressionTypes.ZSTD, () => {
  const { ZstdCodec } = require('zstd-codec')
  const ready = new Promise(resolve => ZstdCodec.run(z => resolve(z)))
  return () => ({
    async compress(encoder) {
      const z = await ready
      return Buffer.from(new z.Simple().compress(encoder.buffer, 3))
    },
    async decompress(buffer) {
      const z = await ready
      // Streaming also handles frames without a content size in the header.
      return Buffer.from(new z.Streaming().decompress(buffer))
    },
  })
})

const CODEC_TYPES = {
  none: CompressionTypes.None,
  gzip: CompressionTypes.GZIP,
  snappy: CompressionTypes.Snappy,
  lz4: CompressionTypes.LZ4,
  zstd: CompressionTypes.ZSTD,
}

// Self-test each registered codec so a broken addon shows up as "codec unavailable"
// with its error instead of as a confusing produce failure.
async function selfTest(name) {
  if (name === 'none' || !codecStatus[name].ok) return
  try {
    const codec = CompressionCodecs[CODEC_TYPES[name]]()
    const input = Buffer.from('kafkajs codec self test '.repeat(20))
    const out = await codec.decompress(await codec.compress({ buffer: input }))
    if (!Buffer.from(out).equals(input)) throw new Error('round trip mismatch')
  } catch (e) {
    codecStatus[name] = { ok: false, error: String(e && e.stack ? e.stack : e) }
  }
}

const b64 = v => (v === null || v === undefined ? null : Buffer.from(v).toString('base64'))

// kafkajs headers are an object: {key: value | [values]}; kafkajs writes them in
// Object.keys order with array values expanded in place. (A null header value makes
// kafkajs 2.2.4 throw in sizeOfHeaders, so none are sent.)
const HEADER_VARIANTS = [
  {},
  { 'trace-id': 'abc-123' },
  { dup: ['first', 'second'], bin: Buffer.from([0, 255, 1, 254]) },
  { a: '', dup: ['x', 'y', 'z'], last: 'L' },
]

function expandHeaders(h) {
  const out = []
  for (const k of Object.keys(h)) {
    const vs = Array.isArray(h[k]) ? h[k] : [h[k]]
    for (const v of vs) out.push([k, b64(Buffer.from(v))])
  }
  return out
}

function makeMessage(codec, send, p, i, seq) {
  let key
  if (i % 5 === 1) key = null
  else if (i % 11 === 4) key = Buffer.alloc(0)
  else key = `js-${codec}-k-${send}-${p}-${i}`
  let value
  if (i % 7 === 3) value = null
  else if (i % 13 === 6) value = Buffer.alloc(0)
  else if (i % 9 === 2) value = Buffer.concat([Buffer.from([...Array(256).keys()]), Buffer.from(`|${p}|${i}`)])
  else value = `js ${codec} s${send} p${p} i${i} ` + 'compressible payload '.repeat(12)
  if (key === null && value === null) key = `js-${codec}-both-null-${send}-${p}-${i}`
  const headers = HEADER_VARIANTS[(i + p + send) % HEADER_VARIANTS.length]
  const timestamp = BASE_TS + seq
  return {
    msg: { partition: p, key, value, headers, timestamp: String(timestamp) },
    expected: {
      partition: p,
      key: key === null ? null : b64(Buffer.from(key)),
      value: value === null ? null : b64(Buffer.from(value)),
      headers: expandHeaders(headers),
      timestamp,
    },
  }
}

function stderrLogger() {
  return ({ namespace, level, label, log }) => {
    const { message, ...extra } = log
    process.stderr.write(`[kafkajs ${label} ${namespace}] ${message} ${JSON.stringify(extra)}\n`)
  }
}

function checkDeadline(what) {
  if (Date.now() - started > DEADLINE_MS) throw new Error(`deadline exceeded during ${what}`)
}

// Read one partition from `from` until `end` with kafkajs' Fetch request/decoder.
async function fetchPartition(cluster, codec, topic, partition, from, end) {
  const meta = cluster.findTopicPartitionMetadata(topic).find(m => m.partitionId === partition)
  if (!meta) throw new Error(`no metadata for ${topic}[${partition}]`)
  const broker = await cluster.findBroker({ nodeId: String(meta.leader) })
  const out = []
  let offset = BigInt(from)
  while (offset < BigInt(end)) {
    checkDeadline(`fetch ${topic}[${partition}]`)
    const resp = await broker.fetch({
      isolationLevel: 1, // READ_COMMITTED, kafkajs consumer default
      maxWaitTime: 100,
      minBytes: 1,
      maxBytes: 1 << 20,
      topics: [{ topic, partitions: [{ partition, fetchOffset: offset.toString(), maxBytes: 1 << 20 }] }],
    })
    const part = resp.responses.find(r => r.topicName === topic).partitions.find(x => x.partition === partition)
    if (part.errorCode !== 0) throw new Error(`fetch ${topic}[${partition}]@${offset}: error code ${part.errorCode}`)
    for (const m of part.messages) {
      if (m.isControlRecord) continue
      const o = BigInt(m.offset)
      if (o < offset) continue // a batch starting before the fetch offset
      const headers = []
      for (const k of Object.keys(m.headers)) {
        const vs = Array.isArray(m.headers[k]) ? m.headers[k] : [m.headers[k]]
        for (const v of vs) headers.push([k, b64(v)])
      }
      out.push({
        codec,
        topic,
        partition,
        offset: Number(o),
        key: b64(m.key),
        value: b64(m.value),
        headers,
        timestamp: Number(m.timestamp),
      })
      offset = o + 1n
    }
  }
  return out
}

async function main() {
  for (const name of Object.keys(CODEC_TYPES)) await selfTest(name)
  const codecs = Object.keys(CODEC_TYPES).filter(n => codecStatus[n].ok)

  const kafka = new Kafka({
    clientId: 'strata-kafkajs-test',
    brokers: [bootstrap],
    logLevel: logLevel.WARN,
    logCreator: stderrLogger,
    connectionTimeout: 5000,
    requestTimeout: 15000,
    retry: { retries: 3, initialRetryTime: 100 },
  })
  const result = { codecs, codecStatus, topics: {}, sent: [], offsets: {}, byTimestamp: {}, fetched: [], fetchError: null }

  const admin = kafka.admin()
  await admin.connect()
  const producer = kafka.producer({
    idempotent: false,
    allowAutoTopicCreation: false,
    createPartitioner: Partitioners.DefaultPartitioner,
  })
  await producer.connect()
  try {
    let seq = 0
    for (const codec of codecs) {
      checkDeadline(`produce ${codec}`)
      const topic = `${prefix}-${codec}`
      result.topics[codec] = topic
      const created = await admin.createTopics({
        topics: [{ topic, numPartitions: PARTITIONS, replicationFactor: 1 }],
        waitForLeaders: true,
        timeout: 15000,
      })
      if (created !== true) throw new Error(`createTopics(${topic}) returned ${created}`)
      for (let send = 0; send < 2; send++) {
        const batch = []
        for (let i = 0; i < PER_PARTITION_PER_SEND; i++) {
          for (let p = 0; p < PARTITIONS; p++) batch.push(makeMessage(codec, send, p, i, seq++))
        }
        const meta = await producer.send({
          topic,
          acks: -1,
          timeout: 15000,
          compression: CODEC_TYPES[codec],
          messages: batch.map(b => b.msg),
        })
        // one RecordMetadata per partition; kafkajs keeps per-partition message order
        for (let p = 0; p < PARTITIONS; p++) {
          const md = meta.find(m => m.topicName === topic && m.partition === p)
          if (!md || md.errorCode !== 0) throw new Error(`no/failed metadata for ${topic}[${p}]: ${JSON.stringify(meta)}`)
          const base = BigInt(md.baseOffset)
          batch.filter(b => b.msg.partition === p).forEach((b, idx) => {
            result.sent.push({ codec, topic, ...b.expected, offset: Number(base + BigInt(idx)) })
          })
        }
      }
      result.offsets[codec] = (await admin.fetchTopicOffsets(topic))
        .map(o => ({ partition: o.partition, offset: o.offset, high: o.high, low: o.low }))
        .sort((a, b) => a.partition - b.partition)
      const mine = result.sent.filter(s => s.topic === topic)
      const probes = [mine[0].timestamp, mine[Math.floor(mine.length / 2)].timestamp, mine[mine.length - 1].timestamp + 1]
      result.byTimestamp[codec] = []
      for (const ts of probes) {
        const r = await admin.fetchTopicOffsetsByTimestamp(topic, ts)
        result.byTimestamp[codec].push({
          timestamp: ts,
          offsets: r.map(o => ({ partition: o.partition, offset: o.offset })).sort((a, b) => a.partition - b.partition),
        })
      }
    }
  } finally {
    await producer.disconnect()
    await admin.disconnect()
  }

  // Read back with kafkajs' own Fetch path. Kafka#createCluster is private (a Symbol).
  let cluster
  try {
    const sym = Object.getOwnPropertySymbols(kafka).find(s => s.description === 'private:Kafka:createCluster')
    if (!sym) throw new Error('kafkajs internals changed: no private:Kafka:createCluster')
    cluster = kafka[sym]({ allowAutoTopicCreation: false, metadataMaxAge: 300000 })
    await cluster.connect()
    for (const codec of codecs) {
      const topic = result.topics[codec]
      await cluster.addTargetTopic(topic)
      await cluster.refreshMetadata()
      for (const o of result.offsets[codec]) {
        result.fetched.push(...(await fetchPartition(cluster, codec, topic, o.partition, '0', o.high)))
      }
    }
  } catch (e) {
    result.fetchError = String(e && e.stack ? e.stack : e)
  } finally {
    if (cluster) await cluster.disconnect().catch(() => {})
  }

  fs.writeFileSync(outPath, JSON.stringify(result, null, 1))
}

main().then(
  () => process.exit(0),
  e => {
    console.error(e && e.stack ? e.stack : e)
    try {
      fs.writeFileSync(outPath, JSON.stringify({ error: String(e && e.stack ? e.stack : e) }))
    } catch (_) {}
    process.exit(1)
  }
)
