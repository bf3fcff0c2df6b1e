#!/usr/bin/env node
// kafkajs against a kesque broker. Driven by tests/test_compat_kafkajs.py (make compat).
//
//   node kafkajs_compat.js <command> '<json args>'
//
// Prints one JSON document on stdout (the result); kafkajs logs go to stderr.
//
// Commands
//   produce  {brokers, topic, codec: "none"|"gzip", idempotent, input}  input: JSON lines
//            {p, k, v, h: [[name, b64], ...], ts} with k/v base64 or null -> {count}
//   consume  {brokers, topic, want: {p: n}, start: {p: offset}, output, maxWaitTime}
//            kafkajs' consumer needs consumer groups (JoinGroup/SyncGroup), which kesque does
//            not serve yet, so this reads with kafkajs' own Cluster/Broker classes: Metadata,
//            then Fetch (kafkajs speaks Fetch v11) to each partition leader, records decoded
//            and decompressed by kafkajs. Writes JSON lines {p, o, k, v, h, ts} -> {count}
//   admin    {brokers, ops: [{op, args: [...]}]}  calls admin[op](...args) in order and
//            returns [{ok, result} | {ok: false, error, type}] (createTopics, describeConfigs,
//            alterConfigs, createPartitions, deleteTopicRecords, fetchTopicOffsets,
//            fetchTopicOffsetsByTimestamp, fetchTopicMetadata, describeCluster, listTopics, ...)

'use strict'

const fs = require('fs')
const readline = require('readline')
const { Kafka, CompressionTypes, logLevel } = require('kafkajs')

const [, , command, rawArgs] = process.argv
const args = JSON.parse(rawArgs || '{}')

const logCreator = () => ({ namespace, level, label, log }) => {
  const { message, ...extra } = log
  process.stderr.write(`[kafkajs ${label}] ${namespace}: ${message} ${JSON.stringify(extra)}\n`)
}

function client() {
  return new Kafka({
    clientId: 'kesque-compat',
    brokers: args.brokers.split(','),
    logLevel: logLevel[(process.env.KAFKAJS_LOG_LEVEL || 'WARN').toUpperCase()],
    logCreator,
    retry: { retries: 3, initialRetryTime: 100 },
    requestTimeout: 15000,
  })
}

const b64 = buf => (buf === null || buf === undefined ? null : Buffer.from(buf).toString('base64'))
const unb64 = s => (s === null || s === undefined ? null : Buffer.from(s, 'base64'))

async function readJsonLines(path) {
  const out = []
  const rl = readline.createInterface({ input: fs.createReadStream(path), crlfDelay: Infinity })
  for await (const line of rl) if (line.trim()) out.push(JSON.parse(line))
  return out
}

// kafkajs headers are an object; repeated names become arrays (kept adjacent, in order)
function toHeaders(list) {
  const h = {}
  for (const [name, value] of list) {
    const v = unb64(value)
    if (h[name] === undefined) h[name] = v
    else if (Array.isArray(h[name])) h[name].push(v)
    else h[name] = [h[name], v]
  }
  return h
}

function fromHeaders(obj) {
  const out = []
  for (const [name, v] of Object.entries(obj || {})) {
    for (const one of Array.isArray(v) ? v : [v]) out.push([name, b64(one)])
  }
  return out
}

async function produce() {
  const recs = await readJsonLines(args.input)
  const kafka = client()
  const producer = kafka.producer({
    idempotent: !!args.idempotent,
    maxInFlightRequests: args.idempotent ? 1 : 5,
    allowAutoTopicCreation: false,
  })
  await producer.connect()
  const compression = { none: CompressionTypes.None, gzip: CompressionTypes.GZIP }[args.codec]
  if (compression === undefined) throw new Error(`kafkajs has no built-in codec ${args.codec}`)
  const chunk = args.chunk || 2000
  let count = 0
  try {
    for (let i = 0; i < recs.length; i += chunk) {
      const messages = recs.slice(i, i + chunk).map(r => ({
        partition: r.p,
        key: unb64(r.k),
        value: unb64(r.v),
        headers: toHeaders(r.h),
        timestamp: String(r.ts),
      }))
      const res = await producer.send({ topic: args.topic, compression, acks: -1, messages })
      for (const r of res) if (r.errorCode !== 0) throw new Error(`produce error ${JSON.stringify(r)}`)
      count += messages.length
    }
  } finally {
    await producer.disconnect()
  }
  return { count }
}

function privateCluster(kafka) {
  const sym = Object.getOwnPropertySymbols(kafka).find(s => String(s).includes('createCluster'))
  return kafka[sym]({ allowAutoTopicCreation: false })
}

async function consume() {
  const kafka = client()
  const cluster = privateCluster(kafka)
  await cluster.connect()
  await cluster.addTargetTopic(args.topic)
  await cluster.refreshMetadata()
  const want = args.want
  const pos = {}
  const got = {}
  for (const p of Object.keys(want)) {
    pos[p] = BigInt((args.start || {})[p] || 0)
    got[p] = 0
  }
  const out = fs.createWriteStream(args.output)
  const idleMs = args.idleMs || 10000
  let lastProgress = Date.now()
  try {
    while (Object.keys(want).some(p => got[p] < want[p])) {
      const pending = Object.keys(want).filter(p => got[p] < want[p]).map(Number)
      const byLeader = cluster.findLeaderForPartitions(args.topic, pending)
      let progress = false
      for (const [nodeId, partitions] of Object.entries(byLeader)) {
        const broker = await cluster.findBroker({ nodeId })
        const res = await broker.fetch({
          isolationLevel: 0,
          maxWaitTime: args.maxWaitTime || 100,
          minBytes: 1,
          maxBytes: 10 << 20,
          topics: [
            {
              topic: args.topic,
              partitions: partitions.map(p => ({ partition: p, fetchOffset: pos[p].toString(), maxBytes: 1 << 20 })),
            },
          ],
        })
        for (const t of res.responses) {
          for (const part of t.partitions) {
            if (part.errorCode !== 0) throw new Error(`fetch error ${part.errorCode} on ${t.topicName}/${part.partition}`)
            const p = part.partition
            for (const m of part.messages) {
              const off = BigInt(m.offset)
              // a batch is returned whole: skip records before the fetch position
              if (off < pos[p] || m.isControlRecord || got[p] >= want[p]) continue
              if (off !== pos[p]) throw new Error(`partition ${p}: offset ${off} after ${pos[p] - 1n}`)
              out.write(JSON.stringify({ p, o: Number(off), k: b64(m.key), v: b64(m.value),
                h: fromHeaders(m.headers), ts: Number(m.timestamp) }) + '\n')
              pos[p] = off + 1n
              got[p] += 1
              progress = true
            }
          }
        }
      }
      if (progress) lastProgress = Date.now()
      else if (Date.now() - lastProgress > idleMs) break
    }
  } finally {
    await new Promise(resolve => out.end(resolve))
    await cluster.disconnect()
  }
  return { count: Object.values(got).reduce((a, b) => a + b, 0), got }
}

function plain(value) {
  if (value === undefined) return null
  return JSON.parse(JSON.stringify(value, (k, v) => (typeof v === 'bigint' ? v.toString() : v)))
}

async function admin() {
  const kafka = client()
  const a = kafka.admin()
  await a.connect()
  const results = []
  try {
    for (const { op, args: opArgs } of args.ops) {
      try {
        results.push({ ok: true, result: plain(await a[op](...(opArgs || []))) })
      } catch (e) {
        results.push({ ok: false, error: String(e.message || e), type: e.type || e.name })
      }
    }
  } finally {
    await a.disconnect()
  }
  return results
}

const commands = { produce, consume, admin }

;(async () => {
  if (!commands[command]) throw new Error(`unknown command ${command}`)
  const result = await commands[command]()
  process.stdout.write(JSON.stringify(result) + '\n')
})().catch(e => {
  process.stderr.write(`kafkajs_compat ${command} failed: ${e.stack || e}\n`)
  process.exit(1)
})
