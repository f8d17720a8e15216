#!/usr/bin/env node
// kafkajs side of test_groups_other_clients.py: one group consumer.
//
//   node kafkajs_group.js <bootstrap host:port> <topic> <groupId> <count> <output.json>
//
// Joins <groupId> (kafka.consumer({groupId}), subscribe fromBeginning, eachMessage),
// processes exactly <count> records (records delivered after that are ignored, neither
// recorded nor committed), commits, per partition, the offset after the last record it
// processed (autoCommit off, so nothing else is ever committed), and disconnects (which
// leaves the group). Writes {processed: [{partition, offset, value}], committed:
// [{partition, offset}], joins: [GROUP_JOIN payloads], crashes: [...], error} to
// <output.json>; logs go to stderr. Exit code 0 iff it processed <count> records and
// committed them within the deadline.
'use strict'

const fs = require('fs')
const { Kafka, logLevel } = require('kafkajs')

const [bootstrap, topic, groupId, countArg, outPath] = process.argv.slice(2)
if (!bootstrap || !topic || !groupId || !countArg || !outPath) {
  console.error('usage: kafkajs_group.js <bootstrap> <topic> <groupId> <count> <out.json>')
  process.exit(2)
}
const count = Number(countArg)
const DEADLINE_MS = 60000

const result = { processed: [], committed: [], joins: [], crashes: [], error: null }

function write() {
  fs.writeFileSync(outPath, JSON.stringify(result, null, 1))
}

async function main() {
  const kafka = new Kafka({
    clientId: 'strata-kafkajs-group',
    brokers: [bootstrap],
    logLevel: logLevel.WARN,
    connectionTimeout: 5000,
    requestTimeout: 15000,
    retry: { initialRetryTime: 200, retries: 10 },
  })
  const consumer = kafka.consumer({
    groupId,
    sessionTimeout: 10000,
    rebalanceTimeout: 20000,
    heartbeatInterval: 1000,
    maxWaitTimeInMs: 200,
    allowAutoTopicCreation: false,
  })
  consumer.on(consumer.events.GROUP_JOIN, e => result.joins.push(e.payload))
  consumer.on(consumer.events.CRASH, e => result.crashes.push(String(e.payload.error && e.payload.error.stack)))

  let finish
  const finished = new Promise(resolve => { finish = resolve })
  let timer
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(
      `processed only ${result.processed.length} of ${count} records within ${DEADLINE_MS} ms`)), DEADLINE_MS)
  })

  await consumer.connect()
  try {
    await consumer.subscribe({ topics: [topic], fromBeginning: true })
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        if (result.processed.length >= count) return
        result.processed.push({
          partition,
          offset: Number(message.offset),
          value: message.value === null ? null : message.value.toString(),
        })
        if (result.processed.length === count) finish()
      },
    })
    if (count > 0) await Promise.race([finished, timeout])
    const next = new Map()
    for (const r of result.processed) {
      next.set(r.partition, Math.max(next.get(r.partition) || 0, r.offset + 1))
    }
    result.committed = [...next.entries()].sort((a, b) => a[0] - b[0])
      .map(([partition, offset]) => ({ partition, offset }))
    await consumer.commitOffsets(result.committed.map(
      ({ partition, offset }) => ({ topic, partition, offset: String(offset) })))
  } finally {
    clearTimeout(timer)
    await consumer.disconnect()
  }
}

main().then(
  () => { write(); process.exit(0) },
  e => {
    result.error = String(e && e.stack ? e.stack : e)
    console.error(result.error)
    write()
    process.exit(1)
  },
)
