// Reference for tests/canonical_node.rs: prints JSON.stringify(JSON.parse(text)) for each line.
// Each input line is the JSON text hex-encoded (UTF-8), so raw newlines and U+2028 survive.
// JSON.stringify never emits a raw newline, so its output is one line per input; a text that
// JSON.parse rejects prints "ERR".
"use strict";
const fs = require("fs");

const lines = fs.readFileSync(process.argv[2], "utf8").split("\n");
const out = [];
for (const line of lines) {
  if (line === "") continue;
  const text = Buffer.from(line, "hex").toString("utf8");
  try {
    out.push(JSON.stringify(JSON.parse(text)));
  } catch (e) {
    out.push("ERR");
  }
}
fs.writeFileSync(process.argv[3], out.join("\n") + "\n");
