#!/usr/bin/env node
// kafkajs side of test_transactions.py (transactions with kafkajs 2.2.4).
//
//   node kafkajs_transactions.js <bootstrap host:port> <topic> <partitions> <transactionalId> <groupPrefix> <output.json>
//
// With one transactional producer (kafka.producer({transactionalId, idempotent: true,
// maxInFlightRequests: 1})): transaction 1 sends `PER_TXN` records per partition and
// commits; transaction 2 sends as many and aborts; transaction 3 sends as many and
// commits. Each send's RecordMetadata gives the offsets (baseOffset + index per
// partition). Then a plain producer writes one non-transactional sentinel per
// partition, and two kafkajs group consumers (fromBeginning, readUncommitted false and
// true) read every partition until its sentinel: kafkajs' own aborted-transaction
// filtering. Writes {sent: [{txn, outcome, partition, offset, value}], sentinels:
// [{partition, offset}], readCommitted: [...], readUncommitted: [...]} to
// <output.json>; logs go to stderr. Exit code 0 iff nothing threw.
'use strict'

const fs = require('fs')
const { Kafka, logLevel } = require('kafkajs')

const [bootstrap, topic, partitionsArg, transactionalId, groupPrefix, outPath] = process.argv.slice(2)
if (!bootstrap || !topic || !partitionsArg || !transactionalId || !groupPrefix || !outPath) {
  console.error('usage: kafkajs_transactions.js <bootstrap> <topic> <partitions> <transactionalId> <groupPrefix> <out.json>')
  process.exit(2)
}
const PARTITIONS = Number(partitionsArg)
const PER_TXN = 7
const DEADLINE_MS = 60000

function stderrLogger() {
  return ({ namespace, level, label, log }) => {
    const { message, ...extra } = log
    process.stderr.write(`[kafkajs ${label} ${namespace}] ${message} ${JSON.stringify(extra)}\n`)
  }
}

const kafka = new Kafka({
  clientId: 'strata-kafkajs-txn',
  brokers: [bootstrap],
  logLevel: logLevel.WARN,
  logCreator: stderrLogger,
  connectionTimeout: 5000,
  requestTimeout: 15000,
  retry: { retries: 8, initialRetryTime: 100 },
})

const result = { sent: [], sentinels: [], readCommitted: [], readUncommitted: [] }

async function sendInTxn(txn, name, outcome) {
  const messages = []
  for (let i = 0; i < PER_TXN; i++) {
    for (let p = 0; p < PARTITIONS; p++) {
      messages.push({ partition: p, key: `k${p}`, value: `js-${name}-${outcome}-p${p}-${i}` })
    }
  }
  const meta = await txn.send({ topic, acks: -1, timeout: 15000, messages })
  for (let p = 0; p < PARTITIONS; p++) {
    const md = meta.find(m => m.topicName === topic && m.partition === p)
    if (!md || md.errorCode !== 0) throw new Error(`no/failed metadata for ${topic}[${p}]: ${JSON.stringify(meta)}`)
    const base = BigInt(md.baseOffset)
    messages.filter(m => m.partition === p).forEach((m, idx) => {
      result.sent.push({ txn: name, outcome, partition: p, offset: Number(base + BigInt(idx)), value: m.value })
    })
  }
}

// A group consumer reading every partition from the beginning until its sentinel.
async function readUntilSentinels(readUncommitted) {
  const groupId = `${groupPrefix}-${readUncommitted ? 'uncommitted' : 'committed'}`
  const consumer = kafka.consumer({
    groupId,
    readUncommitted,
    sessionTimeout: 10000,
    rebalanceTimeout: 20000,
    heartbeatInterval: 1000,
    maxWaitTimeInMs: 200,
    allowAutoTopicCreation: false,
  })
  const out = []
  const seen = new Set()
  let finish
  const finished = new Promise(resolve => { finish = resolve })
  let timer
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(
      `${groupId}: sentinels seen on ${[...seen]} of ${PARTITIONS} partitions within ${DEADLINE_MS} ms`)), DEADLINE_MS)
  })
  await consumer.connect()
  try {
    await consumer.subscribe({ topics: [topic], fromBeginning: true })
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        if (seen.has(partition)) return
        const value = message.value === null ? null : message.value.toString()
        if (value === `sentinel-p${partition}`) {
          seen.add(partition)
          if (seen.size === PARTITIONS) finish()
          return
        }
        out.push({ partition, offset: Number(message.offset), value })
      },
    })
    await Promise.race([finished, timeout])
  } finally {
    clearTimeout(timer)
    await consumer.disconnect()
  }
  return out
}

async function main() {
  const producer = kafka.producer({
    transactionalId,
    idempotent: true,
    maxInFlightRequests: 1,
    allowAutoTopicCreation: false,
  })
  await producer.connect()
  try {
    const t1 = await producer.transaction()
    await sendInTxn(t1, 't1', 'commit')
    await t1.commit()
    const t2 = await producer.transaction()
    await sendInTxn(t2, 't2', 'abort')
    await t2.abort()
    const t3 = await producer.transaction()
    await sendInTxn(t3, 't3', 'commit')
    await t3.commit()
  } finally {
    await producer.disconnect()
  }

  const plain = kafka.producer({ idempotent: false, allowAutoTopicCreation: false })
  await plain.connect()
  try {
    const meta = await plain.send({
      topic,
      acks: -1,
      messages: [...Array(PARTITIONS).keys()].map(p => ({ partition: p, value: `sentinel-p${p}` })),
    })
    for (const m of meta) result.sentinels.push({ partition: m.partition, offset: Number(m.baseOffset) })
  } finally {
    await plain.disconnect()
  }

  result.readCommitted = await readUntilSentinels(false)
  result.readUncommitted = await readUntilSentinels(true)
  fs.writeFileSync(outPath, JSON.stringify(result, null, 1))
}

main().then(
  () => process.exit(0),
  e => {
    console.error(e && e.stack ? e.stack : e)
    try {
      fs.writeFileSync(outPath, JSON.stringify({ ...result, error: String(e && e.stack ? e.stack : e) }))
    } catch (_) {}
    process.exit(1)
  }
)
