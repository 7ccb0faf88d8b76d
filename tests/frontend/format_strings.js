// Formats every string of a translation file as Home Assistant's frontend does (intl-messageformat),
// with each {placeholder} filled in. Prints a JSON list of [key, error] for the strings that fail.
// Usage: node format_strings.js <translations.json> <language>
const fs = require("fs");
const { IntlMessageFormat } = require("intl-messageformat");

const [file, language] = process.argv.slice(2);
const failures = [];
const walk = (node, path) => {
  for (const [key, value] of Object.entries(node)) {
    const here = path ? `${path}.${key}` : key;
    if (typeof value === "object" && value !== null) {
      walk(value, here);
      continue;
    }
    const values = {};
    for (const match of value.matchAll(/\{(\w+)\}/g)) values[match[1]] = "X";
    try {
      const out = new IntlMessageFormat(value, language).format(values);
      if (typeof out !== "string") failures.push([here, "formatted to a non-string (rich text)"]);
    } catch (err) {
      failures.push([here, String(err.message || err)]);
    }
  }
};
walk(JSON.parse(fs.readFileSync(file, "utf8")), "");
process.stdout.write(JSON.stringify(failures));
