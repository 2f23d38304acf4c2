// run.mjs: boots MicroPython rp2 firmware on an emulated RP2040 (rp2040js), for tools/board/emuboard.py.
//
//   node run.mjs --bootrom BOOTROM.ts --uf2 FIRMWARE.uf2 --flash FLASH.bin --flash-bytes N
//                --erase ADDR --program ADDR
//
// stdin/stdout carry frames: one channel byte, a 16-bit little-endian length, the payload.
//   host -> board: 'R' bytes for the USB CDC (the REPL), 'U' bytes for UART0's RX line, 'Q' quit.
//   board -> host: 'R' USB CDC output, 'U' UART0 TX bytes, 'E' an event as JSON ("ready", "usb", "stats",
//                  "reset"). Diagnostics go to stderr.
// Exit status 3 means the firmware asked for a hard reset (watchdog): the host restarts the runner, and
// the flash file carries the board's state across, as flash does on a board.
//
// Two rp2040js limits are handled here:
// - its UART raises the TX interrupt on every interrupt check, so MicroPython's interrupt-driven UART
//   never leaves its handler. Here UART0 has a 32-byte TX FIFO shifted out one byte per 10 bit times
//   at the firmware's baud in emulated time, and TX is raised only once a written byte has gone out and
//   the FIFO is at or below half full (the PL011's default trigger level). RX bytes from the host enter
//   the RX FIFO at the same pace and are held back while it is full.
// - flash erase/program are not emulated (the SSI commands do nothing), so littlefs cannot format and
//   writes read back as 0xff. When the CPU reaches pico-sdk's flash_range_erase(offs, count) or
//   flash_range_program(offs, data, count) (addresses from the ELF's symbols), the runner does the
//   operation on the emulated flash, writes the changed range to the flash file, and returns to LR.
//   Their duration on a real chip (ms per sector) is not modelled.
//
// Time: the clock advances with executed cycles at 125 MHz, so the board's time runs slower than the
// host's while it computes. While the core sleeps (WFI) the clock skips to the next alarm, but never
// ahead of the host's elapsed time, and catches up with it when no alarm is due. MicroPython's idle loop
// mostly polls rather than sleeps, so in practice the board's time runs behind the host's at the REPL too
// (about 20-25 emulated MHz per host second on this machine).
import fs from 'node:fs';
import { performance } from 'node:perf_hooks';
import { RP2040, USBCDC, ConsoleLogger, LogLevel } from 'rp2040js';

const CPU_HZ = 125_000_000;
const CYCLE_NS = 1e9 / CPU_HZ;
const SLICE_MS = 4;           // host time per run slice before the event loop gets a turn
const UART_FIFO = 32;
const UART_TX_TRIGGER = 16;   // TX interrupt when the TX FIFO holds at most this many bytes
const RPMSG_MAX = 4096;       // frame payload size towards the host

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

// UART0 with a TX FIFO paced at the firmware's baud and a TX interrupt raised only after bytes went out.
function pacedUart(mcu, uart, onTx) {
  const TXFF = 1 << 5, TXFE = 1 << 7, BUSY = 1 << 3, RXFF = 1 << 6, RXFE = 1 << 4;
  const TXINTR = 1 << 5, RXINTR = 1 << 4;
  const tx = [];
  const rxPending = [];
  let shifting = false;
  // 10 bit times at the firmware's baud; before the divider is set (or if it is 0) at 115200
  const byteNanos = () => {
    const baud = uart.baudRate;
    return baud > 0 && baud <= 10_000_000 ? 10e9 / baud : 10e9 / 115200;
  };
  // rp2040js's clock unlinks an alarm before its callback but leaves it marked scheduled: clear the mark
  const txAlarm = mcu.clock.createAlarm(() => {
    txAlarm.scheduled = false;
    onTx(tx.shift());
    if (tx.length) {
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
      uart.feedByte(rxPending.shift());
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
      txAlarm.schedule(byteNanos());
    }
  };
  return {
    receive(bytes) {
      for (const b of bytes) rxPending.push(b);
      if (rxPending.length && !rxAlarm.scheduled) rxAlarm.schedule(byteNanos());
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
  const cdc = new USBCDC(mcu.usbCtrl);
  let usbReady = false;
  const usbIn = [];
  cdc.onDeviceConnected = () => {
    usbReady = true;
    event({ event: 'usb', emu_ns: mcu.clock.nanos, host_ms: performance.now() - t0 });
  };
  cdc.onSerialData = (buffer) => send('R', Buffer.from(buffer));
  mcu.peripherals[0x40058].onWatchdogTrigger = () => {
    event({ event: 'reset', reason: 'watchdog' });
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
    event({ event: 'stats', emu_ns: Math.round(mcu.clock.nanos), cycles: Math.round(cycles), host_ms: performance.now() - t0, flash_ops: flashOps });
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
      event({ event: 'stats', emu_ns: Math.round(clock.nanos), cycles: Math.round(cycles), host_ms: start - t0, flash_ops: flashOps });
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
