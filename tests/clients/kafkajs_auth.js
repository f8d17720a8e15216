#!/usr/bin/env node
// kafkajs side of the authentication tests (test_sasl.py, test_tls.py, test_oauth.py).
//
//   node kafkajs_auth.js <bootstrap host:port> <topic> '<options JSON>'
//
// Options: {"sasl": {"mechanism": "scram-sha-512", "username", "password"}} or
// {"sasl": {"mechanism": "oauthbearer", "token"}}, and/or {"ssl": {"ca", "cert", "key"}}
// naming PEM files. Produces js1..js3 to the topic, reads them back in the group
// g-<topic>, and prints them as JSON. On failure prints "<name>: <message>" to stderr
// and exits 1.
'use strict'

const fs = require('fs')
const { Kafka, logLevel } = require('kafkajs')

const [broker, topic, optionsJson] = process.argv.slice(2)
const options = JSON.parse(optionsJson || '{}')
let ssl
if (options.ssl) {
  ssl = { ca: [fs.readFileSync(options.ssl.ca, 'utf-8')] }
  if (options.ssl.cert) {
    ssl.cert = fs.readFileSync(options.ssl.cert, 'utf-8')
    ssl.key = fs.readFileSync(options.ssl.key, 'utf-8')
  }
}
let sasl = options.sasl
if (sasl && sasl.mechanism === 'oauthbearer') {
  const token = sasl.token
  sasl = { mechanism: 'oauthbearer', oauthBearerProvider: async () => ({ value: token }) }
}
const kafka = new Kafka({ brokers: [broker], clientId: 'kafkajs-auth', logLevel: logLevel.NOTHING,
  ssl, sasl, retry: { retries: 2 } })

;(async () => {
  const producer = kafka.producer()
  await producer.connect()
  await producer.send({ topic, messages: [1, 2, 3].map(i => ({ value: `js${i}` })) })
  await producer.disconnect()
  const consumer = kafka.consumer({ groupId: `g-${topic}` })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  const got = []
  await new Promise((resolve) => {
    consumer.run({ eachMessage: async ({ message }) => {
      got.push(message.value.toString()); if (got.length === 3) resolve()
    } })
  })
  await consumer.disconnect()
  console.log(JSON.stringify(got))
})().catch(e => { console.error(`${e.name}: ${e.message}`); process.exit(1) })
