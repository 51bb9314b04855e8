// The /api/events WebSocket for the signed-in caller, kept open across drops. Nothing is queued for a
// closed socket, so a change made while it was down never arrives as an event: the owner must treat
// every open, the first and each reconnect, as "reload what you show" (onOpen).
//
// After a drop it reconnects with a doubling back-off capped at MAX_RETRY_MS, so a blip costs about a
// second and a server that is down for long is not hammered. Each wait is jittered (half to all of the
// step) so that the pages of a restarted server do not all come back in the same instant.

const FIRST_RETRY_MS = 1000;
const MAX_RETRY_MS = 30000;

export class EventsSocket {
  #token = "";
  #socket = null;
  #timer = 0;
  #step = FIRST_RETRY_MS;

  // onOpen(): the socket is open. onEvent(event): a parsed server event.
  // onState(state, retryMs): "off" | "connecting" | "open" | "retrying" (then retryMs is the wait).
  constructor({ onOpen, onEvent, onState }) {
    this.onOpen = onOpen;
    this.onEvent = onEvent;
    this.onState = onState;
  }

  // Keep a socket open for `token` ("" closes it). The caller has just reached the server, so a pending
  // retry for the same token runs now instead of waiting out its back-off.
  follow(token) {
    if (token === this.#token && this.#socket) return;
    const sameToken = token === this.#token;
    this.#stop();
    this.#token = token;
    if (!sameToken) this.#step = FIRST_RETRY_MS;
    if (token) this.#open(); else this.onState("off");
  }

  #stop() {
    clearTimeout(this.#timer);
    this.#timer = 0;
    const socket = this.#socket;
    this.#socket = null; // its close event sees it was replaced and schedules nothing
    if (socket) socket.close();
  }

  #open() {
    this.#timer = 0;
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const socket = new WebSocket(`${scheme}//${location.host}/api/events?token=${encodeURIComponent(this.#token)}`);
    this.#socket = socket;
    this.onState("connecting");
    socket.addEventListener("open", () => {
      if (socket !== this.#socket) return;
      this.#step = FIRST_RETRY_MS;
      this.onState("open");
      this.onOpen();
    });
    socket.addEventListener("message", (message) => {
      if (socket !== this.#socket) return;
      let event;
      try {
        event = JSON.parse(message.data);
      } catch {
        return; // not ours
      }
      this.onEvent(event);
    });
    socket.addEventListener("close", () => {
      if (socket !== this.#socket) return;
      this.#socket = null;
      const wait = Math.round(this.#step * (0.5 + Math.random() / 2));
      this.#step = Math.min(this.#step * 2, MAX_RETRY_MS);
      this.onState("retrying", wait);
      this.#timer = setTimeout(() => this.#open(), wait);
    });
  }
}
