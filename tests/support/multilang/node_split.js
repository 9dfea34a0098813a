// A Node.js multilang bolt written with node-storm (npm): (..., sentence) -> one tuple per word.
var storm = require('node-storm')
var split = storm.basicbolt(function(data) {
  var words = String(data.tuple[data.tuple.length - 1]).split(' ')
  for (var i = 0; i < words.length; ++i) {
    if (words[i]) this.emit([words[i]])
  }
}).declareOutputFields(['word'])
var builder = storm.topologybuilder()
builder.setBolt('split', split)
storm.submit(builder.createTopology())
