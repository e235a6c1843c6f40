"""The trusted JavaScript that every PAC sandbox loads before the script: the builtins and the locks.

It is one function expression; called with ``restricted`` it hardens the context and returns the
dispatcher through which Python talks to the sandbox (``install``, ``probe``, ``eval``, ``alerts``). Everything the
dispatcher hands back is one JSON string, built in JavaScript while the engine's time limit still
runs, so Python never converts (and so never runs) a value the script controls.

What it does, in order:

* captures the intrinsics it needs, so later tampering cannot reach it;
* defines the PAC builtins in JavaScript (the binding cannot call Python under a time limit):
  the Netscape set with the semantics of the reference engines (Mozilla, Chromium, pacparser),
  ``shExpMatch`` as a linear-time glob,
  the Microsoft IPv6 extensions with Chromium's semantics, ``alert`` captured per evaluation; names
  resolve only to the destination IP the caller already knows;
* pins the clock (``Date``, ``Date.now``, ``Date()``) to the per-evaluation time and makes local time
  UTC, so every hop computes the same answer; ``Math.random`` is a PRNG seeded from (url, host);
* restricted mode (the in-process evaluator): regex execution is a tripwire that asks for the
  isolated evaluator, because a backtracking regex cannot be interrupted inside the process;
* deletes ``__date_clock``, ``Atomics`` and ``SharedArrayBuffer``, deep-freezes every intrinsic and
  makes every global binding read-only, so one evaluation cannot leave state for the next; the
  prototype methods scripts commonly override on their own objects (``toString``, ``valueOf``,
  ``constructor``, error ``name``/``message``) become accessors so that still works.

The script itself is compiled once as the body of a factory function and the factory runs at every
evaluation, so its top-level ``var``/``let``/``const`` state starts fresh each time; assignments to
undeclared names (sloppy scripts) create globals that are removed after the evaluation.
"""

from __future__ import annotations

PRELUDE = r"""
(function (restricted) {
"use strict";
var G = globalThis;
var freeze = Object.freeze, getProto = Object.getPrototypeOf, setProto = Object.setPrototypeOf;
var defineProperty = Object.defineProperty, getOwnPropertyDescriptor = Object.getOwnPropertyDescriptor;
var isExtensible = Object.isExtensible, ownKeys = Reflect.ownKeys, deleteProperty = Reflect.deleteProperty;
var reflectApply = Reflect.apply, reflectConstruct = Reflect.construct;
var jsonStringify = JSON.stringify, realEval = G.eval, fnToString = Function.prototype.toString;
var RealSyntaxError = SyntaxError, RealError = Error, SetCtor = Set, StringCtor = String;
var mathImul = Math.imul, mathFloor = Math.floor, mathTrunc = Math.trunc;
var RealDate = Date, DateProto = Date.prototype, dateUTC = Date.UTC, dateParse = Date.parse;
var dateGetTime = DateProto.getTime;

var MAX_ALERTS = 64, MAX_ALERT_LENGTH = 2000, MAX_TEXT = 300;

// ---- per-evaluation facts, set by begin() -----------------------------------------------------
var curUrl = "", curHost = "", curHostKey = "", destIP = null, destIPv4 = null, nowMs = 0;
var clockRead = false, alerts = [], alertsDropped = 0, tripped = null, rngState = 0, rngSeeded = false;
var factory = null;

function begin(url, host, ip, now) {
    curUrl = StringCtor(url); curHost = StringCtor(host); curHostKey = hostKey(curHost);
    destIP = (typeof ip === "string" && ip !== "") ? ip : null;
    destIPv4 = (destIP !== null && parseIPv4(destIP) !== null) ? destIP : null;
    nowMs = +now; clockRead = false; alerts = []; alertsDropped = 0; tripped = null; rngSeeded = false;
}

function clip(text) {
    return text.length > MAX_TEXT ? text.slice(0, MAX_TEXT) + "..." : text;
}

function hostKey(text) {
    if (text.length > 1 && text.charCodeAt(0) === 91 && text.charCodeAt(text.length - 1) === 93) {
        text = text.slice(1, -1);
    }
    if (text.length > 0 && text.charCodeAt(text.length - 1) === 46) text = text.slice(0, -1);
    return text.toLowerCase();
}

// ---- addresses (no regex: the in-process sandbox has none) ---------------------------------------
function isDigits(text, max) {
    if (text.length < 1 || text.length > max) return false;
    for (var i = 0; i < text.length; i++) {
        var c = text.charCodeAt(i);
        if (c < 48 || c > 57) return false;
    }
    return true;
}

// Dotted quad as the reference engines' isValidIpAddress accepts it: four 1-3 digit parts <= 255.
function parseIPv4(text) {
    text = StringCtor(text);
    var parts = text.split(".");
    if (parts.length !== 4) return null;
    var bytes = [];
    for (var i = 0; i < 4; i++) {
        if (!isDigits(parts[i], 3)) return null;
        var n = +parts[i];
        if (n > 255) return null;
        bytes.push(n);
    }
    return bytes;
}

function parseHexGroup(text) {
    if (text.length < 1 || text.length > 4) return -1;
    var n = 0;
    for (var i = 0; i < text.length; i++) {
        var c = text.charCodeAt(i), d;
        if (c >= 48 && c <= 57) d = c - 48;
        else if (c >= 97 && c <= 102) d = c - 87;
        else if (c >= 65 && c <= 70) d = c - 55;
        else return -1;
        n = n * 16 + d;
    }
    return n;
}

// Groups of one side of "::" into 16-bit numbers; a dotted quad may end the address.
function parseGroups(text, out, lastSide) {
    if (text === "") return true;
    var parts = text.split(":");
    for (var i = 0; i < parts.length; i++) {
        if (lastSide && i === parts.length - 1 && parts[i].indexOf(".") >= 0) {
            var v4 = parseIPv4(parts[i]);
            if (v4 === null) return false;
            out.push(v4[0] * 256 + v4[1], v4[2] * 256 + v4[3]);
            return true;
        }
        var g = parseHexGroup(parts[i]);
        if (g < 0) return false;
        out.push(g);
    }
    return true;
}

// An IPv6 literal (no brackets, no zone) as 16 bytes, or null.
function parseIPv6(text) {
    text = StringCtor(text);
    if (text.length < 2 || text.length > 45) return null;
    var gap = text.indexOf("::");
    if (gap >= 0 && text.indexOf("::", gap + 1) >= 0) return null;
    var head = [], tail = [];
    if (gap >= 0) {
        if (!parseGroups(text.slice(0, gap), head, false) || !parseGroups(text.slice(gap + 2), tail, true)) return null;
        if (head.length + tail.length > 7) return null;
    } else {
        if (!parseGroups(text, head, true) || head.length !== 8) return null;
    }
    var groups = head.slice();
    while (groups.length + tail.length < 8) groups.push(0);
    groups = groups.concat(tail);
    var bytes = [];
    for (var i = 0; i < 8; i++) bytes.push(mathFloor(groups[i] / 256), groups[i] % 256);
    return bytes;
}

function parseIP(text) {
    return parseIPv4(text) || parseIPv6(text);
}

function mapped(bytes) {
    return bytes.length === 16 ? bytes : [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 255, 255].concat(bytes);
}

function compareBytes(a, b) {
    for (var i = 0; i < a.length; i++) if (a[i] !== b[i]) return a[i] - b[i];
    return 0;
}

// ---- name "resolution": only IP literals and the connection's own host ------------------------
function dnsResolve(host) {
    var key = hostKey(StringCtor(host));
    if (parseIPv4(key) !== null) return key;
    if (key !== "" && key === curHostKey && destIPv4 !== null) return destIPv4;
    return null;
}

function dnsResolveEx(host) {
    var key = hostKey(StringCtor(host));
    if (parseIP(key) !== null) return key;
    if (key !== "" && key === curHostKey && destIP !== null) return destIP;
    return "";
}

// ---- the Netscape set, with the reference engines' semantics ------------------------------------
function dnsDomainIs(host, domain) {
    var h = StringCtor(host), d = StringCtor(domain);
    return h.length >= d.length && h.slice(h.length - d.length) === d;  // a plain suffix test
}

function dnsDomainLevels(host) {
    return StringCtor(host).split(".").length - 1;
}

function isValidIpAddress(ipchars) {
    return parseIPv4(ipchars) !== null;
}

// The address as a signed 32-bit number, as the reference engines compute it.
function convert_addr(ipchars) {
    var parts = StringCtor(ipchars).split("."), n = 0;
    for (var i = 0; i < 4; i++) n = (n << 8) | (parts[i] & 0xff);
    return n | 0;
}

function isInNet(ipaddr, pattern, maskstr) {
    if (!isValidIpAddress(pattern) || !isValidIpAddress(maskstr)) return false;
    var address = isValidIpAddress(ipaddr) ? StringCtor(ipaddr) : dnsResolve(ipaddr);
    if (address === null) return false;
    var mask = convert_addr(maskstr);
    return (convert_addr(address) & mask) === (convert_addr(pattern) & mask);
}

function isPlainHostName(host) {
    var text = StringCtor(host);
    return text.indexOf(".") < 0 && text.indexOf(":") < 0;
}

function isResolvable(host) {
    return dnsResolve(host) !== null;
}

function localHostOrDomainIs(host, hostdom) {
    var h = StringCtor(host), full = StringCtor(hostdom);
    return h === full || full.lastIndexOf(h + ".", 0) === 0;
}

// Whole-string, case-sensitive; '*' any run, '?' one character, everything else literal.
// Greedy with one backtrack point: O(len(text) * len(pattern)), never exponential.
function shExpMatch(url, pattern) {
    var s = StringCtor(url), p = StringCtor(pattern);
    var n = s.length, m = p.length, si = 0, pi = 0, star = -1, mark = 0;
    while (si < n) {
        var pc = pi < m ? p.charCodeAt(pi) : -1;
        if (pc === 42) { star = pi++; mark = si; }
        else if (pc === 63 || (pc >= 0 && pc === s.charCodeAt(si))) { si++; pi++; }
        else if (star >= 0) { pi = star + 1; si = ++mark; }
        else return false;
    }
    while (pi < m && p.charCodeAt(pi) === 42) pi++;
    return pi === m;
}

// ---- date and time ranges on the pinned clock (local time is UTC, so "GMT" changes nothing) -------
var DAY_NAMES = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];
var MONTH_NAMES = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"];

function argumentsWithoutGMT(args) {
    var list = [];
    for (var i = 0; i < args.length; i++) list.push(args[i]);
    if (list.length > 0 && list[list.length - 1] == "GMT") list.pop();
    return list;
}

function inRange(start, value, end) {  // inclusive; a start after the end wraps around
    return start <= end ? (start <= value && value <= end) : (value >= start || value <= end);
}

// weekdayRange(wd1 [, wd2] [, "GMT"]); a third argument other than "GMT" leaves wd2 = wd1.
function weekdayRange() {
    var args = argumentsWithoutGMT(arguments);
    if (args.length < 1) return false;
    var first = DAY_NAMES.indexOf(args[0]), last = args.length === 2 ? DAY_NAMES.indexOf(args[1]) : first;
    if (first < 0 || last < 0) return false;
    return inRange(first, new Date().getUTCDay(), last);
}

// dateRange(day | month | year [, ... up to six fields] [, "GMT"]): one field compares today's;
// otherwise the first half of the fields moves a start (Jan 1 00:00:00 this year) and the second
// half an end (Dec 31 23:59:59 this year); two bare days mean days of the current month.
function dateRange() {
    var args = argumentsWithoutGMT(arguments), now = new Date(), n = args.length;
    if (n < 1) return false;
    if (n === 1) {
        var only = parseInt(args[0]);
        if (isNaN(only)) return now.getUTCMonth() == MONTH_NAMES.indexOf(args[0]);
        return only < 32 ? now.getUTCDate() == only : now.getUTCFullYear() == only;
    }
    var year = now.getUTCFullYear();
    var start = new Date(dateUTC(year, 0, 1, 0, 0, 0)), end = new Date(dateUTC(year, 11, 31, 23, 59, 59));
    var half = n >> 1, daysOfThisMonth = false;
    for (var i = 0; i < n; i++) {
        var bound = i < half ? start : end, field = parseInt(args[i]);
        if (isNaN(field)) bound.setUTCMonth(MONTH_NAMES.indexOf(args[i]));
        else if (field < 32) { bound.setUTCDate(field); if (i < half && n <= 2) daysOfThisMonth = true; }
        else bound.setUTCFullYear(field);
    }
    if (daysOfThisMonth) {
        start.setUTCMonth(now.getUTCMonth());
        end.setUTCMonth(now.getUTCMonth());
    }
    return inRange(start.getTime(), now.getTime(), end.getTime());
}

// timeRange(hour | h1, h2 | h1, m1, h2, m2 | h1, m1, s1, h2, m2, s2 [, "GMT"]), inclusive:
// (9, 17) is 09:00:00-17:59:59, (8, 30, 17, 0) is 08:30:00-17:00:59.
function timeRange() {
    var args = argumentsWithoutGMT(arguments), now = new Date(), n = args.length;
    var hour = now.getUTCHours();
    if (n < 1) return false;
    if (n === 1) return hour == args[0];
    if (n === 2) return args[0] <= hour && hour <= args[1];
    var second = (hour * 60 + now.getUTCMinutes()) * 60 + now.getUTCSeconds(), start, end;
    if (n === 4) {
        start = (args[0] * 60 + +args[1]) * 60;
        end = (args[2] * 60 + +args[3]) * 60 + 59;
    } else if (n === 6) {
        start = (args[0] * 60 + +args[1]) * 60 + +args[2];
        end = (args[3] * 60 + +args[4]) * 60 + +args[5];
    } else {
        throw "timeRange: bad number of arguments";
    }
    return inRange(start, second, end);
}

function alert(message) {
    if (alerts.length >= MAX_ALERTS) { alertsDropped++; return; }
    var text = StringCtor(message);
    alerts.push(text.length > MAX_ALERT_LENGTH ? text.slice(0, MAX_ALERT_LENGTH) + "..." : text);
}

// ---- the Microsoft IPv6 extensions, as Chromium implements them ---------------------------------
function isResolvableEx(host) {
    var ipList = dnsResolveEx(host);
    return (ipList != '');
}

function isInNetEx(ipAddress, ipPrefix) {
    var address = parseIP(StringCtor(ipAddress));
    if (address === null) return false;
    var prefix = StringCtor(ipPrefix), slash = prefix.indexOf("/");
    if (slash < 0) return false;
    var network = parseIP(prefix.slice(0, slash)), bitsText = prefix.slice(slash + 1);
    if (network === null || !isDigits(bitsText, 3)) return false;
    var bits = +bitsText;
    if (bits > network.length * 8) return false;
    if (address.length !== network.length) {
        if (network.length === 4) bits += 96;
        address = mapped(address); network = mapped(network);
    }
    for (var i = 0; bits > 0; i++, bits -= 8) {
        var mask = bits >= 8 ? 255 : (0xff00 >> bits) & 0xff;
        if ((address[i] & mask) !== (network[i] & mask)) return false;
    }
    return true;
}

function myIpAddress() { return "127.0.0.1"; }

function myIpAddressEx() { return "127.0.0.1"; }

// IPv6 before IPv4, each ascending; the addresses come back as written; false when any is not one.
function sortIpAddressList(ipAddressList) {
    var text = StringCtor(ipAddressList), cleaned = "";
    for (var i = 0; i < text.length; i++) {
        var c = text.charAt(i);
        if (c !== " " && c !== "\t") cleaned += c;
    }
    if (cleaned === "") return false;
    var entries = [], parts = cleaned.split(";");
    for (var j = 0; j < parts.length; j++) {
        if (parts[j] === "") continue;
        var bytes = parseIP(parts[j]);
        if (bytes === null) return false;
        entries.push({text: parts[j], bytes: bytes, order: entries.length});
    }
    if (entries.length === 0) return false;
    entries.sort(function (a, b) {
        if (a.bytes.length !== b.bytes.length) return b.bytes.length - a.bytes.length;
        return compareBytes(a.bytes, b.bytes) || a.order - b.order;
    });
    var out = [];
    for (var k = 0; k < entries.length; k++) out.push(entries[k].text);
    return out.join(";");
}

function getClientVersion() { return "1.0"; }

// ---- the pinned clock; local time is UTC --------------------------------------------------------
function readClock() {
    clockRead = true;
    return nowMs;
}

function parseAsUTC(text) {
    text = StringCtor(text);
    var asUTC = dateParse(text + "Z");  // a zone-less ISO date-time is UTC here, not process-local
    return asUTC === asUTC ? asUTC : dateParse(text);
}

function PinnedDate(a, b, c, d, e, f, g) {
    if (new.target === undefined) return dateToString.call(new RealDate(readClock()));
    var time, n = arguments.length;
    if (n === 0) time = readClock();
    else if (n === 1) time = typeof a === "string" ? parseAsUTC(a) : dateGetTime.call(new RealDate(a));
    else time = reflectApply(dateUTC, undefined, arguments);
    return reflectConstruct(RealDate, [time], new.target);
}

var DAYS = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
var MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

function pad(n, width) {
    var text = StringCtor(n);
    while (text.length < width) text = "0" + text;
    return text;
}

function yearText(y) {
    return y < 0 ? "-" + pad(-y, 4) : pad(y, 4);
}

function datePart(d) {
    return DAYS[d.getUTCDay()] + " " + MONTHS[d.getUTCMonth()] + " " + pad(d.getUTCDate(), 2) + " " +
           yearText(d.getUTCFullYear());
}

function timePart(d) {
    return pad(d.getUTCHours(), 2) + ":" + pad(d.getUTCMinutes(), 2) + ":" + pad(d.getUTCSeconds(), 2) +
           " GMT+0000";
}

function valid(d) {
    var t = dateGetTime.call(d);
    return t === t;
}

function dateToString() { return valid(this) ? datePart(this) + " " + timePart(this) : "Invalid Date"; }
function dateToDateString() { return valid(this) ? datePart(this) : "Invalid Date"; }
function dateToTimeString() { return valid(this) ? timePart(this) : "Invalid Date"; }
function dateToLocaleString() {
    return valid(this) ? pad(this.getUTCMonth() + 1, 2) + "/" + pad(this.getUTCDate(), 2) + "/" +
        yearText(this.getUTCFullYear()) + ", " + dateToLocaleTimeString.call(this) : "Invalid Date";
}
function dateToLocaleDateString() {
    return valid(this) ? pad(this.getUTCMonth() + 1, 2) + "/" + pad(this.getUTCDate(), 2) + "/" +
        yearText(this.getUTCFullYear()) : "Invalid Date";
}
function dateToLocaleTimeString() {
    if (!valid(this)) return "Invalid Date";
    var h = this.getUTCHours();
    return pad(h % 12 || 12, 2) + ":" + pad(this.getUTCMinutes(), 2) + ":" + pad(this.getUTCSeconds(), 2) +
        (h < 12 ? " AM" : " PM");
}

function installDate() {
    var local = ["Date", "Day", "FullYear", "Hours", "Milliseconds", "Minutes", "Month", "Seconds"];
    for (var i = 0; i < local.length; i++) {
        defineProperty(DateProto, "get" + local[i], {value: DateProto["getUTC" + local[i]]});
        if (local[i] !== "Day") defineProperty(DateProto, "set" + local[i], {value: DateProto["setUTC" + local[i]]});
    }
    var getUTCFullYear = DateProto.getUTCFullYear, setUTCFullYear = DateProto.setUTCFullYear;
    defineProperty(DateProto, "getYear", {value: function getYear() {
        var y = getUTCFullYear.call(this);
        return y === y ? y - 1900 : y;
    }});
    defineProperty(DateProto, "setYear", {value: function setYear(year) {
        var y = +year;
        if (y === y) { y = mathTrunc(y); if (y >= 0 && y <= 99) y += 1900; }
        return setUTCFullYear.call(this, y);
    }});
    defineProperty(DateProto, "getTimezoneOffset", {value: function getTimezoneOffset() {
        return valid(this) ? 0 : NaN;
    }});
    defineProperty(DateProto, "toString", {value: dateToString});
    defineProperty(DateProto, "toDateString", {value: dateToDateString});
    defineProperty(DateProto, "toTimeString", {value: dateToTimeString});
    defineProperty(DateProto, "toLocaleString", {value: dateToLocaleString});
    defineProperty(DateProto, "toLocaleDateString", {value: dateToLocaleDateString});
    defineProperty(DateProto, "toLocaleTimeString", {value: dateToLocaleTimeString});
    defineProperty(DateProto, "constructor", {value: PinnedDate});
    defineProperty(PinnedDate, "prototype", {value: DateProto});
    defineProperty(PinnedDate, "now", {value: function now() { return readClock(); }});
    defineProperty(PinnedDate, "parse", {value: function parse(text) { return parseAsUTC(text); }});
    defineProperty(PinnedDate, "UTC", {value: dateUTC});
    defineProperty(G, "Date", {value: PinnedDate});
}

// ---- Math.random: mulberry32 seeded from (url, host), so every hop draws the same numbers --------
function random() {
    if (!rngSeeded) {
        var text = curUrl + "\n" + curHost, h = 2166136261;
        for (var i = 0; i < text.length; i++) h = mathImul(h ^ text.charCodeAt(i), 16777619);
        rngState = h | 0;
        rngSeeded = true;
    }
    rngState = (rngState + 0x6D2B79F5) | 0;
    var t = rngState;
    t = mathImul(t ^ (t >>> 15), t | 1);
    t ^= t + mathImul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}

// ---- restricted mode: regex execution asks for the isolated evaluator -------------------------
function tripwire(what) {
    return function () {
        tripped = what;
        throw new TypeError(what + " runs only in the isolated PAC evaluator");
    };
}

function installTripwires() {
    var proto = RegExp.prototype, names = ["exec", "test", "compile"];
    var symbols = [Symbol.match, Symbol.matchAll, Symbol.replace, Symbol.search, Symbol.split];
    for (var i = 0; i < names.length; i++) {
        defineProperty(proto, names[i], {value: tripwire("RegExp.prototype." + names[i])});
    }
    for (var j = 0; j < symbols.length; j++) {
        defineProperty(proto, symbols[j], {value: tripwire("RegExp.prototype[" + StringCtor(symbols[j]) + "]")});
    }
    var poisoned = tripwire("RegExp");
    defineProperty(poisoned, "prototype", {value: proto});
    defineProperty(proto, "constructor", {value: poisoned});
    defineProperty(G, "RegExp", {value: poisoned});
}

// ---- locking -------------------------------------------------------------------------------------
// Freezing a prototype makes its data properties read-only for every object that inherits them, so
// "obj.toString = f" would fail (the "override mistake"). The properties scripts commonly override
// become accessors that define an own property on the object assigned to, and refuse the prototype.
function overridable(proto, key) {
    var desc = getOwnPropertyDescriptor(proto, key);
    if (desc === undefined || !("value" in desc)) return;
    var value = desc.value;
    defineProperty(proto, key, {
        get: function () { return value; },
        set: function (replacement) {
            if (this === proto || this === null || this === undefined ||
                (typeof this !== "object" && typeof this !== "function")) {
                throw new TypeError("cannot assign to the shared " + StringCtor(key));
            }
            defineProperty(this, key, {value: replacement, writable: true, enumerable: true, configurable: true});
        },
        enumerable: desc.enumerable,
        configurable: true
    });
}

function allowOverrides() {
    var common = ["toString", "valueOf", "constructor", "toLocaleString", "hasOwnProperty"];
    for (var i = 0; i < common.length; i++) overridable(Object.prototype, common[i]);
    overridable(Function.prototype, "toString");
    overridable(Function.prototype, "constructor");
    overridable(Array.prototype, "toString");
    overridable(Array.prototype, "constructor");
    var errors = [Error, EvalError, RangeError, ReferenceError, SyntaxError, TypeError, URIError, InternalError,
                  AggregateError];
    for (var j = 0; j < errors.length; j++) {
        overridable(errors[j].prototype, "name");
        overridable(errors[j].prototype, "message");
        overridable(errors[j].prototype, "constructor");
        overridable(errors[j].prototype, "toString");
    }
}

function deepFreeze(root) {
    var seen = new SetCtor(), stack = [root];
    while (stack.length > 0) {
        var o = stack.pop();
        if (o === null || o === undefined || (typeof o !== "object" && typeof o !== "function") || seen.has(o)) {
            continue;
        }
        seen.add(o);
        var keys = ownKeys(o);
        for (var i = 0; i < keys.length; i++) {
            var desc = getOwnPropertyDescriptor(o, keys[i]);
            if (desc === undefined) continue;
            if ("value" in desc) stack.push(desc.value);
            else { stack.push(desc.get); stack.push(desc.set); }
        }
        stack.push(getProto(o));
        if (o !== G) freeze(o);
    }
}

var builtins = {
    dnsDomainIs: dnsDomainIs, dnsDomainLevels: dnsDomainLevels, isValidIpAddress: isValidIpAddress,
    convert_addr: convert_addr, isInNet: isInNet, isPlainHostName: isPlainHostName,
    isResolvable: isResolvable, localHostOrDomainIs: localHostOrDomainIs, shExpMatch: shExpMatch,
    weekdayRange: weekdayRange, dateRange: dateRange, timeRange: timeRange, alert: alert,
    dnsResolve: dnsResolve, myIpAddress: myIpAddress, dnsResolveEx: dnsResolveEx,
    isResolvableEx: isResolvableEx, isInNetEx: isInNetEx, myIpAddressEx: myIpAddressEx,
    sortIpAddressList: sortIpAddressList, getClientVersion: getClientVersion
};
var builtinNames = ownKeys(builtins);
for (var b = 0; b < builtinNames.length; b++) {
    defineProperty(G, builtinNames[b], {value: builtins[builtinNames[b]], writable: false, enumerable: false,
                                        configurable: false});
}
delete G.__date_clock;
delete G.Atomics;
delete G.SharedArrayBuffer;
installDate();
defineProperty(Math, "random", {value: random});
if (restricted) installTripwires();
allowOverrides();
deepFreeze(G);
var globalKeys = ownKeys(G);
for (var k = 0; k < globalKeys.length; k++) {
    var desc = getOwnPropertyDescriptor(G, globalKeys[k]);
    defineProperty(G, globalKeys[k], ("value" in desc) ? {writable: false, configurable: false} : {configurable: false});
}
var baseKeys = new SetCtor(globalKeys), baseKeyCount = globalKeys.length, baseProto = getProto(G);

// Remove the globals an evaluation created; true when something could not be undone.
function cleanGlobals() {
    var dirty = false;
    if (getProto(G) !== baseProto) {
        try { setProto(G, baseProto); } catch (e) { /* reported as dirty */ }
        dirty = true;
    }
    if (!isExtensible(G)) dirty = true;
    var keys = ownKeys(G);
    if (keys.length !== baseKeyCount) {
        for (var i = 0; i < keys.length; i++) {
            if (!baseKeys.has(keys[i]) && !deleteProperty(G, keys[i])) dirty = true;
        }
    }
    return dirty;
}

// ---- talking to Python: every answer is one JSON string ------------------------------------------
function describeThrown(e) {
    try {
        if (e === null) return "null (the memory limit, or a thrown null)";
        var type = typeof e;
        if (type === "string") return "'" + clip(e) + "'";
        if (type !== "object" && type !== "function") return type + " " + clip(StringCtor(e));
        if (e instanceof RealError) return clip(StringCtor(e.name) + ": " + StringCtor(e.message));
        return "a thrown " + type;
    } catch (inner) {
        return "an exception";
    }
}

function answer(kind, value, extra) {
    var dirty = cleanGlobals();
    if (tripped !== null) { kind = "isolate"; value = tripped; }
    return jsonStringify({k: kind, v: value, x: extra, a: alerts, ad: alertsDropped, c: clockRead, d: dirty});
}

var SUFFIX = "\n;return typeof FindProxyForURL === \"function\" ? FindProxyForURL : null;\n})";

function install(source) {
    begin("", "", null, 0);
    var wrapped = "(function(){" + source + SUFFIX, compiled;
    try {
        compiled = realEval(wrapped);
    } catch (e) {
        if (e instanceof RealSyntaxError) return answer("syntax", clip(StringCtor(e.message)), e.lineNumber);
        return answer("load", describeThrown(e), null);
    }
    if (typeof compiled !== "function" || reflectApply(fnToString, compiled, []) !== wrapped.slice(1, -1)) {
        return answer("structure", "the script is not one self-contained program", null);
    }
    factory = compiled;
    return answer("ok", null, null);
}

function probe(now) {
    begin("", "", null, now);
    try {
        var entry = factory();
        if (typeof entry !== "function") return answer("entry", "the script defines no function FindProxyForURL", null);
    } catch (e) {
        return answer("load", describeThrown(e), null);
    }
    return answer("ok", null, null);
}

function evaluate(url, host, ip, now) {
    begin(url, host, ip, now);
    try {
        var entry = factory();
        if (typeof entry !== "function") return answer("entry", "FindProxyForURL is not a function", null);
        var r = entry(url, host);
        if (r === null || r === undefined) return answer("null", null, null);
        if (typeof r === "string") return answer("ok", r, null);
        return answer("return", typeof r, null);
    } catch (e) {
        return answer("exception", describeThrown(e), null);
    }
}

return function (op, a, b, c, d) {
    if (op === "eval") return evaluate(a, b, c, d);
    if (op === "install") return install(a);
    if (op === "probe") return probe(a);
    if (op === "alerts") return jsonStringify({a: alerts, ad: alertsDropped});  // after an interrupt
    return null;
};
})
"""
