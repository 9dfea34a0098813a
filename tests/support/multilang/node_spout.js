// A Node.js multilang spout written with node-storm (npm): sentences 0..N-1, reliably
// (message id = index), replaying what fails; N from the topology conf "test.sentences".
var storm = require('node-storm')
var sentences = ['the cow jumped over the moon', 'an apple a day', 'snow white and the seven dwarfs']
var next = 0
var todo = []
var spout = storm.spout(function(sync) {
  var limit = spout.limit
  var i = todo.length ? todo.shift() : (next < limit ? next++ : null)
  if (i !== null) this.emit([i, sentences[i % sentences.length]], {id: String(i)})
  sync()
}).declareOutputFields(['sid', 'sentence'])
spout.on('prepare', function(context) { spout.limit = Number(context.config('test.sentences') || 30) })
// node-storm leaves the sync that ends ack, fail, activate and deactivate to the spout.
spout.on('ack', function() { spout.collector.sync() })
spout.on('fail', function(data) { todo.push(Number(data.id)); spout.collector.sync() })
spout.on('activate', function() { spout.collector.sync() })
spout.on('deactivate', function() { spout.collector.sync() })
var builder = storm.topologybuilder()
builder.setSpout('sentences', spout)
storm.submit(builder.createTopology())
