// run.mjs: boots MicroPython rp2 firmware on an emulated RP2040 (rp2040js), for tools/board/emuboard.py.
//
//   node run.mjs --bootrom BOOTROM.ts --uf2 FIRMWARE.uf2 --flash FLASH.bin --flash-bytes N
//                --erase ADDR --program ADDR [--watchdog-reason R --watchdog-scratch S0,...,S7]
//
// stdin/stdout carry frames: one channel byte, a 16-bit little-endian length, the payload.
//   host -> board: 'R' bytes for the USB CDC (the REPL), 'U' bytes for UART0's RX line, 'u' bytes for
//                  UART1's RX line (the RS-485 bus), 'Q' quit, and the plant around the board as JSON:
//                  'C' config {"de_pin": 2} (the RS-485 driver-enable GPIO; null: none),
//                  'A' ADC input {"channel": 0..4, "volts": 1.65} or {"channel": n, "raw": 0..4095},
//                  'G' GPIO input {"pin": 10, "level": 0|1}, {"pin": 10, "pulses": N, "period_us": P
//                      [, "width_us": W]} or {"pin": 10, "bounce": [us, ...], "final": 0|1},
//                  'I' I2C device {"dev": "mcp9600"|"ads1115", "bus": 0|1, "addr": A, values...},
//                      {"bus": b, "addr": A, "remove": true}, {"bus": b, "addr": A, "nack_after": n|null}.
//   board -> host: 'R' USB CDC output, 'U' UART0 TX bytes, 'u' UART1 TX bytes (those that reached the bus),
//                  'E' an event as JSON ("ready", "usb", "stats", "reset", "de", "pin_done", "error").
//                  Diagnostics go to stderr.
// Exit status 3 means the chip reset through its watchdog: the firmware asked for it (machine.reset(),
// pico-sdk's watchdog_reboot: CTRL.TRIGGER) or the watchdog's timer ran out (rp2040js counts LOAD down in
// emulated time; nothing fed it). The 'reset' event says which ("software" or "watchdog") with the
// WATCHDOG block's REASON and SCRATCH0-7 registers, which survive such a reset on the chip: the host restarts
// the runner with them (--watchdog-reason, --watchdog-scratch), so machine.reset_cause() says WDT_RESET and
// the REASON bits tell the two apart, and the flash file carries the board's state across, as flash does.
// Without them (a power cycle) REASON and SCRATCH read 0, as after power-on.
//
// Two rp2040js limits are handled here:
// - its UART raises the TX interrupt on every interrupt check, so MicroPython's interrupt-driven UART
//   never leaves its handler. Here UART0 has a 32-byte TX FIFO shifted out one byte per 10 bit times
//   at the firmware's baud in emulated time, and TX is raised only once a written byte has gone out and
//   the FIFO is at or below half full (the PL011's default trigger level). RX bytes from the host enter
//   the RX FIFO at the same pace and are held back while it is full. UART1 is paced the same way, but a
//   character takes the bits its line control register says (start, 5-8 data, parity, 1-2 stop).
// - flash erase/program are not emulated (the SSI commands do nothing), so littlefs cannot format and
//   writes read back as 0xff. When the CPU reaches pico-sdk's flash_range_erase(offs, count) or
//   flash_range_program(offs, data, count) (addresses from the ELF's symbols), the runner does the
//   operation on the emulated flash, writes the changed range to the flash file, and returns to LR.
//   Their duration on a real chip (ms per sector) is not modelled.
//
// The plant (what a node's inputs are wired to), all in emulated time:
// - RS-485 on UART1: with a DE pin named, a byte reaches the host only if DE was high for its whole
//   frame, and bytes from the host while DE is high are dropped (a half-duplex transceiver's receiver is
//   off while it drives). Each DE high..low period is reported as a "de" event: de_high_ns,
//   first_start_ns (the first byte's start bit), last_stop_end_ns (the last byte's stop bit(s) ended),
//   de_low_ns, bytes, tx_cut (bytes still in the UART when DE fell), rx_dropped, char_ns, bits.
// - ADC: rp2040js's channel values (12-bit codes; volts at a 3.3 V reference).
// - GPIO inputs: rp2040js latches an edge on every input write, even one repeating the level, so a
//   level is written only when it changes; its IO_BANK0 edge interrupts then reach Pin.irq. Pulse trains
//   and bounces play on alarms and end with a "pin_done" event.
// - I2C: rp2040js's controllers NACK every address unless told otherwise; here emulated MCP9600 and
//   ADS1115 devices answer on either controller, whatever pins it uses. Transfers take no emulated time.
//   rp2040js leaves TX_EMPTY clear after an abort (a NACK), where the hardware's flushed FIFO sets it:
//   pico-sdk waits for it, so a missing device would read as a timeout; the runner sets it. MicroPython
//   bit-bangs zero-length writes (i2c.scan()) on the controller's pins, so those pins are also modelled as
//   open-drain lines with pull-ups and a bit-level device side.
//
// Time: the clock advances with executed cycles at 125 MHz, so the board's time runs slower than the
// host's while it computes. While the core sleeps (WFI) the clock skips to the next alarm, but never
// ahead of the host's elapsed time, and catches up with it when no alarm is due. MicroPython's idle loop
// mostly polls rather than sleeps, so in practice the board's time runs behind the host's at the REPL too
// (about 20-25 emulated MHz per host second on this machine).
import fs from 'node:fs';
import { performance } from 'node:perf_hooks';
import { RP2040, USBCDC, ConsoleLogger, LogLevel, GPIOPinState, I2CMode } from 'rp2040js';

const CPU_HZ = 125_000_000;
const CYCLE_NS = 1e9 / CPU_HZ;
const SLICE_MS = 4;           // host time per run slice before the event loop gets a turn
const UART_FIFO = 32;
const UART_TX_TRIGGER = 16;   // TX interrupt when the TX FIFO holds at most this many bytes
const RPMSG_MAX = 4096;       // frame payload size towards the host
const ADC_VREF = 3.3;         // the Pico's ADC reference (3V3 through its filter)
const LCR_PEN = 1 << 1, LCR_STP2 = 1 << 3;  // UARTLCR_H: parity enable, two stop bits
const FUNC_I2C = 3, FUNC_SIO = 5;           // IO_BANK0 GPIO function selects

function parseArgs(argv) {
  const out = {};
  for (let i = 0; i < argv.length; i += 2) {
    if (!argv[i].startsWith('--')) throw new Error('unexpected argument ' + argv[i]);
    out[argv[i].slice(2)] = argv[i + 1];
  }
  for (const key of ['bootrom', 'uf2', 'flash', 'flash-bytes', 'erase', 'program']) {
    if (out[key] === undefined) throw new Error('missing --' + key);
  }
  return out;
}

// The bootrom as rp2040js's demo ships it: a TypeScript file holding one Uint32Array literal.
function loadBootromTs(path) {
  const text = fs.readFileSync(path, 'utf8');
  const body = text.slice(text.indexOf('[') + 1, text.lastIndexOf(']'));
  const words = body.split(',').map((s) => s.trim()).filter((s) => s.length).map((s) => Number(s));
  if (words.length < 1024 || words.some((w) => !Number.isFinite(w))) {
    throw new Error(path + ': not a bootrom array (' + words.length + ' words)');
  }
  return new Uint32Array(words);
}

// UF2 blocks: 512 bytes, magics at 0/4/508, target address at 12, payload size at 16, data at 32.
function loadUf2(path, flash, flashBytes) {
  const data = fs.readFileSync(path);
  let blocks = 0;
  for (let off = 0; off + 512 <= data.length; off += 512) {
    if (data.readUInt32LE(off) !== 0x0a324655 || data.readUInt32LE(off + 4) !== 0x9e5d5157
        || data.readUInt32LE(off + 508) !== 0x0ab16f30) {
      throw new Error(path + ': block ' + blocks + ' is not a UF2 block');
    }
    const addr = data.readUInt32LE(off + 12) - 0x10000000;
    const size = data.readUInt32LE(off + 16);
    if (addr < 0 || addr + size > flashBytes || size > 476) {
      throw new Error(path + ': block ' + blocks + ' writes outside the flash');
    }
    flash.set(data.subarray(off + 32, off + 32 + size), addr);
    blocks++;
  }
  if (!blocks) throw new Error(path + ': no UF2 blocks');
  return blocks;
}

function send(channel, payload) {
  let i = 0;
  do {
    const part = payload.subarray(i, i + RPMSG_MAX);
    const head = Buffer.from([channel.charCodeAt(0), part.length & 0xff, part.length >> 8]);
    process.stdout.write(Buffer.concat([head, part]));
    i += RPMSG_MAX;
  } while (i < payload.length);
}

function event(obj) {
  send('E', Buffer.from(JSON.stringify(obj)));
}

// Bits on the wire per character: start, data, parity, stop(s), as the UART's line control register says.
function frameBits(uart) {
  const lcr = uart.lineCtrlRegister;
  return 1 + uart.wordLength + (lcr & LCR_PEN ? 1 : 0) + (lcr & LCR_STP2 ? 2 : 1);
}

// A UART with a TX FIFO paced at the firmware's baud and a TX interrupt raised only after bytes went out.
// line.bits() gives the bits per character (UART0 keeps its fixed 10), line.started() is called when a
// byte's start bit begins, onTx(byte) when its last stop bit ends, and line.accept(byte) decides whether a
// byte from the host reaches the RX FIFO (it takes its time on the wire either way).
function pacedUart(mcu, uart, onTx, line = {}) {
  const bits = line.bits || (() => 10);
  const started = line.started || (() => {});
  const accept = line.accept || (() => true);
  const TXFF = 1 << 5, TXFE = 1 << 7, BUSY = 1 << 3, RXFF = 1 << 6, RXFE = 1 << 4;
  const TXINTR = 1 << 5, RXINTR = 1 << 4;
  const tx = [];
  const rxPending = [];
  let shifting = false;
  // a character's bit times at the firmware's baud; before the divider is set (or if it is 0) at 115200
  const byteNanos = () => {
    const baud = uart.baudRate;
    return bits() * 1e9 / (baud > 0 && baud <= 10_000_000 ? baud : 115200);
  };
  // rp2040js's clock unlinks an alarm before its callback but leaves it marked scheduled: clear the mark
  const txAlarm = mcu.clock.createAlarm(() => {
    txAlarm.scheduled = false;
    onTx(tx.shift());
    if (tx.length) {
      started();
      txAlarm.schedule(byteNanos());
    } else {
      shifting = false;
    }
    if (tx.length <= UART_TX_TRIGGER) {
      uart.interruptStatus |= TXINTR;
      uart.checkInterrupts();
    }
  });
  const rxAlarm = mcu.clock.createAlarm(() => {
    rxAlarm.scheduled = false;
    if (rxPending.length && !uart.rxFIFO.full) {
      const b = rxPending.shift();
      if (accept(b)) uart.feedByte(b);
    }
    if (rxPending.length) rxAlarm.schedule(byteNanos());  // the next byte, or this one once there is room
  });
  uart.checkInterrupts = function () {
    mcu.setInterrupt(this.irq, !!(this.interruptStatus & this.interruptMask));
  };
  Object.defineProperty(uart, 'flags', {
    get() {
      return (this.rxFIFO.full ? RXFF : 0) | (this.rxFIFO.empty ? RXFE : 0)
        | (tx.length >= UART_FIFO ? TXFF : 0) | (tx.length === 0 ? TXFE : 0)
        | (shifting ? BUSY : 0);
    },
  });
  const write = uart.writeUint32.bind(uart);
  uart.writeUint32 = function (offset, value) {
    if (offset !== 0) {
      write(offset, value);
      return;
    }
    if (tx.length < UART_FIFO) tx.push(value & 0xff);  // a full FIFO drops the byte, as the PL011 does
    if (tx.length > UART_TX_TRIGGER) {
      this.interruptStatus &= ~TXINTR;
      this.checkInterrupts();
    }
    if (!shifting) {
      shifting = true;
      started();
      txAlarm.schedule(byteNanos());
    }
  };
  return {
    receive(bytes) {
      for (const b of bytes) rxPending.push(b);
      if (rxPending.length && !rxAlarm.scheduled) rxAlarm.schedule(byteNanos());
    },
    pending: () => tx.length,  // bytes written and not yet fully shifted out (the one on the line included)
    charNanos: byteNanos,
    bits,
  };
}


// RS-485 driver enable on UART1: watches the DE GPIO the host names and decides which bytes reach the bus.
function driverEnable(mcu) {
  let pin = null;
  let unlisten = null;
  let high = false;
  let burst = null;       // the DE-high period being recorded
  let shiftStart = null;  // when the byte now on the line began, null while the line is idle
  const dropped = { tx: 0, rx: 0 };
  const now = () => Math.round(mcu.clock.nanos);
  const de = {
    line: null,  // the paced UART1, for its queued bytes and character time
    dropped,
    configure(p) {
      if (p !== null && !(Number.isInteger(p) && p >= 0 && p < mcu.gpio.length)) {
        throw new Error('de_pin: a GPIO number 0..' + (mcu.gpio.length - 1) + ' or null');
      }
      if (unlisten) unlisten();
      unlisten = null;
      pin = p;
      high = false;
      burst = null;
      if (p !== null) {
        unlisten = mcu.gpio[p].addListener((value) => level(value));
        level(mcu.gpio[p].value);
      }
    },
    // a byte's start bit begins
    started() {
      shiftStart = now();
      if (burst && burst.first_start_ns === null) burst.first_start_ns = shiftStart;
    },
    // a byte's stop bit(s) ended: true if it reached the bus (DE high all along, or no DE pin named)
    finished() {
      const onBus = pin === null || (high && burst !== null && shiftStart >= burst.de_high_ns);
      shiftStart = null;
      if (onBus && burst) {
        burst.bytes++;
        burst.last_stop_end_ns = now();
      } else if (!onBus) {
        dropped.tx++;
      }
      return onBus;
    },
    // a byte from the bus: the receiver is off while the driver is on
    accept() {
      if (pin === null || !high) return true;
      dropped.rx++;
      if (burst) burst.rx_dropped++;
      return false;
    },
  };
  function level(value) {
    const h = value === GPIOPinState.High;
    if (h === high) return;
    high = h;
    if (h) {
      // a byte already on the line when DE rose counts as the first: its start precedes de_high_ns
      burst = { de_high_ns: now(), first_start_ns: shiftStart, last_stop_end_ns: null, bytes: 0, rx_dropped: 0 };
    } else if (burst) {
      event({ event: 'de', pin, ...burst, de_low_ns: now(), tx_cut: de.line.pending(),
              char_ns: Math.round(de.line.charNanos()), bits: de.line.bits() });
      burst = null;
    }
  }
  return de;
}

// GPIO inputs the host drives: levels, pulse trains and bouncing contacts, timed in emulated time.
function gpioInputs(mcu) {
  const runs = new Map();  // pin -> the alarm of the sequence it is playing
  const inputs = {
    owned: null,  // called with a pin the host takes over (the I2C lines let go of it)
    // rp2040js latches an edge on every setInputValue, even one that repeats the level: write changes only
    set(pin, level) {
      const g = mcu.gpio[pin];
      if (g.rawInputValue === level) return 0;
      g.setInputValue(level);
      return 1;
    },
    message(msg) {
      const pin = msg.pin;
      if (!(Number.isInteger(pin) && pin >= 0 && pin < mcu.gpio.length)) {
        throw new Error('pin: 0..' + (mcu.gpio.length - 1));
      }
      cancel(pin);
      if (inputs.owned) inputs.owned(pin);
      if (msg.pulses !== undefined) {
        const n = msg.pulses, period = msg.period_us * 1000;
        const width = (msg.width_us === undefined ? msg.period_us / 2 : msg.width_us) * 1000;
        if (!(Number.isInteger(n) && n >= 0 && n <= 10_000_000)) throw new Error('pulses: a count 0..10000000');
        if (!(period > 0 && width > 0 && width < period)) throw new Error('period_us > width_us > 0');
        const rest = !!mcu.gpio[pin].rawInputValue;  // pulses go away from the resting level and back
        const steps = [];
        for (let i = 0; i < n; i++) steps.push([i ? period - width : 0, !rest], [width, rest]);
        play(pin, steps);
      } else if (msg.bounce !== undefined) {
        // toggles at once and after each interval but the last; after the last it settles at "final"
        const d = msg.bounce;
        if (!Array.isArray(d) || d.some((x) => !(x > 0))) {
          throw new Error('bounce: a list of intervals in us, each > 0');
        }
        if (msg.final !== 0 && msg.final !== 1) throw new Error('final: 0 or 1');
        const steps = [[0, null]];
        for (let i = 0; i < d.length; i++) steps.push([d[i] * 1000, i === d.length - 1 ? !!msg.final : null]);
        if (!d.length) steps[0][1] = !!msg.final;
        play(pin, steps);
      } else if (msg.level === 0 || msg.level === 1) {
        inputs.set(pin, !!msg.level);
      } else {
        throw new Error('G: give "level", "pulses" or "bounce"');
      }
    },
  };
  function cancel(pin) {
    const alarm = runs.get(pin);
    if (alarm) alarm.cancel();
    runs.delete(pin);
  }
  // steps: [ns after the previous step, level (null: toggle)]; the first applies at once if its delay is 0
  function play(pin, steps) {
    let i = 0, edges = 0;
    const g = mcu.gpio[pin];
    const advance = () => {
      do {
        const lv = steps[i++][1];
        edges += inputs.set(pin, lv === null ? !g.rawInputValue : lv);
      } while (i < steps.length && steps[i][0] <= 0);
      if (i < steps.length) {
        alarm.schedule(steps[i][0]);
      } else {
        runs.delete(pin);
        event({ event: 'pin_done', pin, edges, level: g.rawInputValue ? 1 : 0, emu_ns: Math.round(mcu.clock.nanos) });
      }
    };
    // rp2040js's clock unlinks an alarm before its callback but leaves it marked scheduled: clear the mark
    const alarm = mcu.clock.createAlarm(() => { alarm.scheduled = false; advance(); });
    runs.set(pin, alarm);
    if (steps.length) advance();
  }
  return inputs;
}

function setAdc(mcu, msg) {
  const ch = msg.channel;
  if (!(Number.isInteger(ch) && ch >= 0 && ch < mcu.adc.channelValues.length)) throw new Error('channel: 0..4');
  let code;
  if (msg.raw !== undefined) code = msg.raw;
  else if (typeof msg.volts === 'number') code = Math.round(msg.volts / ADC_VREF * 4096);
  else throw new Error('A: give "volts" or "raw"');
  if (!Number.isFinite(code)) throw new Error('A: not a number');
  mcu.adc.channelValues[ch] = Math.max(0, Math.min(4095, Math.round(code)));
}

const int16 = (x) => Math.max(-32768, Math.min(32767, Math.round(x)));
const be16 = (v) => [(v >> 8) & 0xff, v & 0xff];

// A device behind a register pointer: after its address, the first byte written sets the pointer and
// later ones fill the pointed register, most significant byte first (committed at a (re)start or stop);
// a read returns the pointed register's bytes from its first. nack_after: n NACKs the data byte after the
// first n of a write (a fault the host injects).
class PointerDevice {
  constructor() {
    this.ptr = 0;
    this.incoming = null;
    this.out = [];
    this.written = 0;
    this.nackAfter = null;
  }
  set(msg) {
    if (msg.nack_after !== undefined) {
      if (msg.nack_after !== null && !(Number.isInteger(msg.nack_after) && msg.nack_after >= 0)) {
        throw new Error('nack_after: a byte count or null');
      }
      this.nackAfter = msg.nack_after;
    }
  }
  start(read) {
    this.commit();
    this.written = 0;
    if (read) this.out = this.readRegister(this.ptr).slice();
    return true;
  }
  write(b) {
    if (this.nackAfter !== null && this.written >= this.nackAfter) return false;
    if (this.written++ === 0) {
      this.ptr = b & this.pointerMask;
      this.incoming = [];
    } else {
      this.incoming.push(b);
    }
    return true;
  }
  read() {
    return this.out.length ? this.out.shift() : 0xff;
  }
  stop() {
    this.commit();
  }
  commit() {
    if (this.incoming && this.incoming.length) this.writeRegister(this.ptr, this.incoming);
    this.incoming = null;
  }
}

// MCP9600 thermocouple EMF to temperature converter (0x60-0x67). Registers: 0x00 hot junction, 0x01
// junction delta, 0x02 cold junction (int16, 0.0625 C/LSB), 0x03 raw ADC (24 bits), 0x04 status,
// 0x05 sensor config (type bits 6:4, filter 2:0), 0x06 device config, 0x08-0x0b alert configs,
// 0x0c-0x0f hysteresis, 0x10-0x13 alert limits (16 bits), 0x20 device ID 0x40 and revision.
class Mcp9600 extends PointerDevice {
  constructor() {
    super();
    this.kind = 'mcp9600';
    this.pointerMask = 0xff;
    this.hot = 0;
    this.cold = 0;
    this.delta = null;  // null: hot - cold
    this.rev = 0x14;
    this.status = 0;
    this.adcRaw = 0;
    this.regs = new Map([[0x05, [0]], [0x06, [0]]]);
    for (let r = 0x08; r <= 0x0f; r++) this.regs.set(r, [0]);
    for (let r = 0x10; r <= 0x13; r++) this.regs.set(r, [0, 0]);
  }
  set(msg) {
    super.set(msg);
    for (const k of ['hot_c', 'cold_c', 'delta_c', 'status', 'rev', 'adc_raw']) {
      if (msg[k] !== undefined && msg[k] !== null && typeof msg[k] !== 'number') throw new Error(k + ': a number');
    }
    if (msg.hot_c !== undefined) this.hot = msg.hot_c;
    if (msg.cold_c !== undefined) this.cold = msg.cold_c;
    if (msg.delta_c !== undefined) this.delta = msg.delta_c;
    if (msg.status !== undefined) this.status = msg.status & 0xff;
    if (msg.rev !== undefined) this.rev = msg.rev & 0xff;
    if (msg.adc_raw !== undefined) this.adcRaw = msg.adc_raw & 0xffffff;
  }
  readRegister(r) {
    const t = (c) => be16(int16(c / 0.0625) & 0xffff);
    switch (r) {
      case 0x00: return t(this.hot);
      case 0x01: return t(this.delta === null ? this.hot - this.cold : this.delta);
      case 0x02: return t(this.cold);
      case 0x03: return [(this.adcRaw >> 16) & 0xff, (this.adcRaw >> 8) & 0xff, this.adcRaw & 0xff];
      case 0x04: return [this.status];
      case 0x20: return [0x40, this.rev];
      default: return this.regs.get(r) || [0];
    }
  }
  writeRegister(r, bytes) {
    if (r === 0x04) this.status = bytes[0];
    else if (this.regs.has(r)) this.regs.set(r, bytes.slice(0, this.regs.get(r).length));
  }
}

// ADS1115 16-bit ADC (0x48-0x4b). Pointer 0 conversion, 1 config, 2/3 thresholds, all 16 bits big-endian.
// Config: OS bit 15 (write 1 in single-shot mode starts a conversion; reads 0 while converting), MUX 14:12
// (0-3 differential AIN0-1, 0-3, 1-3, 2-3; 4-7 AINx against GND), PGA 11:9 (full scale 6.144 ... 0.256 V),
// MODE bit 8 (1 single-shot, 0 continuous), DR 7:5 (8 ... 860 samples/s: a conversion takes 1/DR). The
// comparator bits are kept but the ALERT/RDY pin is not modelled.
const ADS_FSR = [6.144, 4.096, 2.048, 1.024, 0.512, 0.256, 0.256, 0.256];
const ADS_SPS = [8, 16, 32, 64, 128, 250, 475, 860];
class Ads1115 extends PointerDevice {
  constructor(mcu) {
    super();
    this.kind = 'ads1115';
    this.pointerMask = 0x03;
    this.volts = [0, 0, 0, 0];
    this.config = 0x0583;  // the power-on config less OS, which reads from `converting`
    this.conversion = 0;
    this.thresholds = [0x8000, 0x7fff];
    this.converting = false;
    this.alarm = mcu.clock.createAlarm(() => {
      this.alarm.scheduled = false;
      this.conversion = this.code() & 0xffff;
      if (this.config & 0x100) {
        this.converting = false;
      } else {
        this.alarm.schedule(this.periodNanos());  // continuous: the next conversion
      }
    });
  }
  set(msg) {
    super.set(msg);
    if (msg.volts !== undefined) {
      const v = msg.volts;
      if (!Array.isArray(v) || v.length > 4 || v.some((x) => typeof x !== 'number')) {
        throw new Error('volts: up to 4 numbers');
      }
      v.forEach((x, i) => { this.volts[i] = x; });
    }
  }
  periodNanos() {
    return 1e9 / ADS_SPS[(this.config >> 5) & 7];
  }
  code() {
    const mux = (this.config >> 12) & 7;
    const v = this.volts;
    const pairs = [[0, 1], [0, 3], [1, 3], [2, 3]];
    const volts = mux >= 4 ? v[mux - 4] : v[pairs[mux][0]] - v[pairs[mux][1]];
    return int16(volts / ADS_FSR[(this.config >> 9) & 7] * 32768);
  }
  readRegister(r) {
    switch (r) {
      case 0: return be16(this.conversion);
      case 1: return be16((this.converting ? 0 : 0x8000) | this.config);
      default: return be16(this.thresholds[r - 2]);
    }
  }
  writeRegister(r, bytes) {
    if (bytes.length < 2) return;  // a register is written whole
    const v = (bytes[0] << 8) | bytes[1];
    if (r === 1) {
      this.config = v & 0x7fff;
      if (!(v & 0x100)) {  // continuous conversions from now
        this.converting = true;
        this.alarm.schedule(this.periodNanos());
      } else if (v & 0x8000) {  // one single-shot conversion
        this.converting = true;
        this.alarm.schedule(this.periodNanos());
      }  // single-shot without OS: a conversion under way finishes, then the device powers down
    } else if (r >= 2) {
      this.thresholds[r - 2] = v;
    }
  }
}

const I2C_DEVICES = {
  mcp9600: { make: () => new Mcp9600(), addrs: [0x60, 0x67] },
  ads1115: { make: (mcu) => new Ads1115(mcu), addrs: [0x48, 0x4b] },
};

// The host's 'I' messages: add, update or remove a device on bus 0 or 1.
function i2cMessage(mcu, buses, msg) {
  const bus = msg.bus === undefined ? 0 : msg.bus;
  if (bus !== 0 && bus !== 1) throw new Error('bus: 0 or 1');
  if (!(Number.isInteger(msg.addr) && msg.addr >= 0 && msg.addr < 128)) throw new Error('addr: a 7-bit address');
  const devices = buses[bus];
  if (msg.remove) {
    devices.delete(msg.addr);
    return;
  }
  let dev = devices.get(msg.addr);
  if (msg.dev !== undefined && (!dev || dev.kind !== msg.dev)) {
    const spec = I2C_DEVICES[msg.dev];
    if (!spec) throw new Error('dev: one of ' + Object.keys(I2C_DEVICES).join(', '));
    if (msg.addr < spec.addrs[0] || msg.addr > spec.addrs[1]) {
      const [lo, hi] = spec.addrs.map((a) => '0x' + a.toString(16));
      throw new Error(msg.dev + ' answers at ' + lo + '-' + hi + ' only');
    }
    dev = spec.make(mcu);
    devices.set(msg.addr, dev);
  }
  if (!dev) throw new Error('no device at bus ' + bus + ' address ' + msg.addr + ': give "dev"');
  dev.set(msg);
}

// rp2040js's I2C controller calls back at each bus step; the devices answer at once.
function i2cController(i2c, devices) {
  const TX_EMPTY = 1 << 4;
  let dev = null;
  i2c.onConnect = (addr, mode) => {
    dev = devices.get(addr) || null;
    i2c.completeConnect(dev !== null && dev.start(mode === I2CMode.Read));
  };
  i2c.onWriteByte = (b) => i2c.completeWrite(dev !== null && dev.write(b));
  i2c.onReadByte = () => i2c.completeRead(dev ? dev.read() : 0xff);
  i2c.onStop = () => {
    if (dev) dev.stop();
    dev = null;
    i2c.completeStop();
  };
  // an abort flushes the TX FIFO, which leaves it at or below its threshold: TX_EMPTY, as on the chip
  const abort = i2c.abort.bind(i2c);
  i2c.abort = (reason) => {
    abort(reason);
    i2c.setInterrupts(TX_EMPTY);
  };
}

// The I2C pins as open-drain lines with pull-ups and a bit-level device side, for transfers MicroPython
// bit-bangs on them (zero-length writes: i2c.scan()). A pin joins its controller's bus (GPIO 4k/4k+1: I2C0
// SDA/SCL, 4k+2/4k+3: I2C1) when the firmware selects the I2C function on it, stays while it is I2C or SIO,
// and leaves on another function or when the host drives it. A line is low when its pin drives low or, for
// SDA, when the addressed device does; both pins read the lines.
function i2cLines(mcu, buses, inputs) {
  const lines = [0, 1].map((n) => ({ devices: buses[n], sda: null, scl: null, sdaLevel: true, sclLevel: true,
    devLow: false, state: 'idle' }));
  const member = new Map();  // pin -> its bus's lines
  const listening = new Set();
  const pinLow = (p) => mcu.gpio[p].value === GPIOPinState.Low;
  function update(b) {
    if (b.sda === null || b.scl === null) return;
    const scl = !pinLow(b.scl);
    const sda = !pinLow(b.sda) && !b.devLow;
    inputs.set(b.scl, scl);
    inputs.set(b.sda, sda);
    const devLow = b.devLow;
    if (scl !== b.sclLevel) {
      b.sclLevel = scl;
      b.sdaLevel = sda;
      if (scl) sclRise(b); else sclFall(b);
    } else if (sda !== b.sdaLevel) {
      b.sdaLevel = sda;
      if (scl) {
        if (sda) stop(b); else start(b);
      }
    }
    if (b.devLow !== devLow) update(b);  // the device's SDA changed while SCL is low: data, not a condition
  }
  function start(b) {
    b.state = 'rx';
    b.addressing = true;
    b.bits = 0;
    b.byte = 0;
    b.devLow = false;
  }
  function stop(b) {
    if (b.dev) b.dev.stop();
    b.dev = null;
    b.state = 'idle';
    b.devLow = false;
  }
  function sclRise(b) {
    if (b.state === 'rx') {
      b.byte = ((b.byte << 1) | (b.sdaLevel ? 1 : 0)) & 0xff;
      b.bits++;
    } else if (b.state === 'tx_ack') {
      b.masterAck = !b.sdaLevel;
    }
  }
  function send(b) {  // the device puts the next byte's first bit on SDA
    b.tx = b.dev.read();
    b.bit = 7;
    b.devLow = !(b.tx & 0x80);
    b.state = 'tx';
  }
  function sclFall(b) {
    switch (b.state) {
      case 'rx':
        if (b.bits === 8) {
          if (b.addressing) {
            b.dev = b.devices.get(b.byte >> 1) || null;
            b.reading = !!(b.byte & 1);
            b.ack = b.dev !== null && b.dev.start(b.reading);
          } else {
            b.ack = b.dev.write(b.byte);
          }
          b.devLow = b.ack;
          b.state = 'rx_ack';
        }
        break;
      case 'rx_ack':
        b.devLow = false;
        if (!b.ack) {
          b.state = 'idle';  // until the master's stop or start
        } else if (b.addressing && b.reading) {
          b.addressing = false;
          send(b);
        } else {
          b.addressing = false;
          b.state = 'rx';
          b.bits = 0;
          b.byte = 0;
        }
        break;
      case 'tx':
        if (--b.bit >= 0) {
          b.devLow = !((b.tx >> b.bit) & 1);
        } else {
          b.devLow = false;
          b.state = 'tx_ack';
        }
        break;
      case 'tx_ack':
        if (b.masterAck) send(b); else b.state = 'idle';
        break;
    }
  }
  function leave(pin) {
    const b = member.get(pin);
    if (!b) return;
    member.delete(pin);
    if (b.sda === pin) b.sda = null;
    if (b.scl === pin) b.scl = null;
    b.state = 'idle';
    b.devLow = false;
  }
  inputs.owned = leave;
  return {
    // the firmware wrote a GPIO's function select
    pinFunction(pin, fn) {
      if (fn === FUNC_I2C) {
        const b = lines[(pin >> 1) & 1];
        if (member.get(pin) !== b) {
          leave(pin);
          const role = pin & 1 ? 'scl' : 'sda';
          if (b[role] !== null) member.delete(b[role]);
          b[role] = pin;
          member.set(pin, b);
          inputs.set(pin, true);  // the pull-up
          if (!listening.has(pin)) {
            listening.add(pin);
            mcu.gpio[pin].addListener(() => { const m = member.get(pin); if (m) update(m); });
          }
          update(b);
        }
      } else if (fn !== FUNC_SIO) {
        leave(pin);
      }
    },
  };
}

function main() {
  const args = parseArgs(process.argv.slice(2));
  const flashBytes = Number(args['flash-bytes']);
  const eraseAt = Number(args.erase) & ~1;
  const programAt = Number(args.program) & ~1;

  const mcu = new RP2040();
  mcu.logger = new ConsoleLogger(LogLevel.Error);
  mcu.loadBootrom(loadBootromTs(args.bootrom));  // resets the chip, which blanks the flash
  // The QSPI chip-select line reads high, as its pull-up makes it on a board with BOOTSEL released:
  // rp2040js leaves that pad's input disabled (low), and CircuitPython reads it at boot as the BOOTSEL
  // button and waits for it to be released. MicroPython reads it only in rp2.bootsel_button().
  Object.defineProperty(mcu.qspi[1], 'inputValue', { get: () => true });

  // The flash: the file's contents (a previous run), with the UF2 programmed over them as a drag-and-drop
  // of the image onto a board does; the filesystem region beyond the image keeps its contents.
  const flash = mcu.flash.subarray(0, flashBytes);
  let fd;
  if (fs.existsSync(args.flash)) {
    const saved = fs.readFileSync(args.flash);
    flash.set(saved.subarray(0, flashBytes));
    fd = fs.openSync(args.flash, 'r+');
  } else {
    fd = fs.openSync(args.flash, 'w+');
  }
  loadUf2(args.uf2, flash, flashBytes);
  fs.writeSync(fd, flash, 0, flashBytes, 0);
  fs.ftruncateSync(fd, flashBytes);

  const persist = (offs, count) => fs.writeSync(fd, flash, offs, count, offs);
  let flashOps = 0;
  const flashOp = () => {
    const core = mcu.core;
    const r = core.registers;
    const offs = r[0] >>> 0;
    if (core.PC === eraseAt) {
      const count = r[1] >>> 0;
      if (offs + count <= flashBytes) {
        flash.fill(0xff, offs, offs + count);
        persist(offs, count);
      }
    } else {
      const src = r[1] >>> 0;
      const count = r[2] >>> 0;
      if (offs + count <= flashBytes) {
        for (let i = 0; i < count; i++) flash[offs + i] &= mcu.readUint8(src + i);  // NOR: bits only clear
        persist(offs, count);
      }
    }
    flashOps++;
    core.PC = core.LR & ~1;  // return from the function (bx lr)
  };

  const uart = pacedUart(mcu, mcu.uart[0], (b) => send('U', Buffer.from([b])));
  const de = driverEnable(mcu);
  const uart1 = pacedUart(mcu, mcu.uart[1], (b) => { if (de.finished()) send('u', Buffer.from([b])); },
    { bits: () => frameBits(mcu.uart[1]), started: de.started, accept: de.accept });
  de.line = uart1;
  const inputs = gpioInputs(mcu);
  const buses = [new Map(), new Map()];  // I2C0, I2C1: address -> emulated device
  mcu.i2c.forEach((i2c, n) => i2cController(i2c, buses[n]));
  const lines = i2cLines(mcu, buses, inputs);
  const io = mcu.peripherals[0x40014];  // IO_BANK0: GPIOn_CTRL at 8n+4 holds the function select
  const ioWrite = io.writeUint32.bind(io);
  io.writeUint32 = (offset, value) => {
    ioWrite(offset, value);
    if (offset <= 0xec && offset & 4) lines.pinFunction(offset >>> 3, value & 0x1f);
  };
  const plant = {
    C: (msg) => {
      for (const k of Object.keys(msg)) if (k !== 'de_pin') throw new Error('C: unknown key ' + k);
      if (msg.de_pin !== undefined) de.configure(msg.de_pin);
    },
    A: (msg) => setAdc(mcu, msg),
    G: (msg) => inputs.message(msg),
    I: (msg) => i2cMessage(mcu, buses, msg),
  };
  const cdc = new USBCDC(mcu.usbCtrl);
  let usbReady = false;
  const usbIn = [];
  cdc.onDeviceConnected = () => {
    usbReady = true;
    event({ event: 'usb', emu_ns: mcu.clock.nanos, host_ms: performance.now() - t0 });
  };
  cdc.onSerialData = (buffer) => send('R', Buffer.from(buffer));
  const wdt = mcu.peripherals[0x40058];
  if (args['watchdog-reason'] !== undefined) wdt.reason = Number(args['watchdog-reason']) & 3;
  if (args['watchdog-scratch'] !== undefined) {
    args['watchdog-scratch'].split(',').slice(0, 8).forEach((v, i) => { wdt.scratchData[i] = Number(v) >>> 0; });
  }
  wdt.onWatchdogTrigger = () => {
    // the chip resets here: its watchdog stops with it (rp2040js's periodic alarm, at a counter of 0, would
    // otherwise fire again at once, forever, within the same clock tick)
    wdt.enable = false;
    wdt.alarm.enable = false;
    wdt.timer.enable = false;
    if (finished) return;
    // REASON: bit 0 the timer ran out, bit 1 FORCE (rp2040js sets it before calling this)
    event({ event: 'reset', reason: wdt.reason & 1 ? 'watchdog' : 'software', watchdog_reason: wdt.reason,
            scratch: Array.from(wdt.scratchData), emu_ns: Math.round(mcu.clock.nanos) });
    finish(3);
  };

  // frames from the host
  let inbuf = Buffer.alloc(0);
  process.stdin.on('data', (chunk) => {
    inbuf = Buffer.concat([inbuf, chunk]);
    while (inbuf.length >= 3) {
      const len = inbuf[1] | (inbuf[2] << 8);
      if (inbuf.length < 3 + len) break;
      const ch = String.fromCharCode(inbuf[0]);
      const payload = inbuf.subarray(3, 3 + len);
      inbuf = inbuf.subarray(3 + len);
      if (ch === 'R') {
        for (const b of payload) usbIn.push(b);
      } else if (ch === 'U') {
        uart.receive(payload);
      } else if (ch === 'u') {
        uart1.receive(payload);
      } else if (plant[ch]) {
        try {
          plant[ch](JSON.parse(payload.toString()));
        } catch (e) {  // a bad message is reported, and the board runs on
          event({ event: 'error', channel: ch, message: e && e.message ? e.message : String(e) });
        }
      } else if (ch === 'Q') {
        finish(0);
      }
    }
  });
  process.stdin.on('end', () => finish(0));

  let cycles = 0;
  let finished = false;
  function finish(code) {
    if (finished) return;
    finished = true;
    try { fs.fsyncSync(fd); fs.closeSync(fd); } catch (e) { /* already closed */ }
    event({ event: 'stats', emu_ns: Math.round(mcu.clock.nanos), cycles: Math.round(cycles), host_ms: performance.now() - t0, flash_ops: flashOps,
            uart1_tx_dropped: de.dropped.tx, uart1_rx_dropped: de.dropped.rx });
    process.stdout.write(Buffer.alloc(0), () => process.exit(code));
  }

  const t0 = performance.now();
  let lastStats = t0;
  mcu.core.PC = 0x10000000;  // boot2 at the start of flash, as the bootrom would jump to it
  event({ event: 'ready', flash_bytes: flashBytes });

  const clock = mcu.clock;
  const core = mcu.core;
  function slice() {
    if (finished) return;
    const start = performance.now();
    if (start - lastStats > 1000) {
      lastStats = start;
      event({ event: 'stats', emu_ns: Math.round(clock.nanos), cycles: Math.round(cycles), host_ms: start - t0, flash_ops: flashOps,
              uart1_tx_dropped: de.dropped.tx, uart1_rx_dropped: de.dropped.rx });
    }
    while (usbReady && usbIn.length && cdc.txFIFO.itemCount < cdc.txFIFO.size) {
      cdc.sendSerialByte(usbIn.shift());
    }
    for (;;) {
      for (let i = 0; i < 20000; i++) {
        if (core.waiting) {
          const dt = clock.nanosToNextAlarm;
          const hostNs = (performance.now() - t0) * 1e6;
          if (dt <= 0) {  // nothing scheduled: time passes as the host's until an interrupt wakes it
            if (clock.nanos < hostNs) clock.tick(hostNs - clock.nanos);
            setTimeout(slice, 1);
            return;
          }
          if (clock.nanos + dt > hostNs) {
            // asleep until an alarm later than the host's time: wait for the host to catch up
            const waitMs = Math.min(10, Math.max(0, (clock.nanos + dt - hostNs) / 1e6));
            setTimeout(slice, waitMs);
            return;
          }
          clock.tick(dt);
          cycles += dt / CYCLE_NS;
        } else {
          const pc = core.PC;
          if (pc === eraseAt || pc === programAt) flashOp();
          const n = core.executeInstruction();
          cycles += n;
          clock.tick(n * CYCLE_NS);
        }
      }
      if (performance.now() - start > SLICE_MS || finished) break;
    }
    setImmediate(slice);
  }
  slice();
}

try {
  main();
} catch (e) {
  process.stderr.write('emulator: ' + (e && e.message ? e.message : e) + '\n');
  process.exit(2);
}
