// voicegate call page: WHIP signalling, one audio track each way, the `events` DataChannel.
// No build step and no dependencies. Other panels (e.g. memory) can listen to server events with
// window.voicegate.on("memory.changed", handler) and read the caller's token with window.voicegate.token().

const RESUME_KEY = "voicegate.resume"; // {token, location}: per tab, so two tabs are two calls
const TOKEN_KEY = "voicegate.jwt";
const MAX_RESUME_ATTEMPTS = 3;
const GATHER_TIMEOUT_MS = 3000;

const $ = (id) => document.getElementById(id);
const ui = {
  call: $("call"), hangup: $("hangup"), connection: $("connection"), agent: $("agent-state"), who: $("who"),
  notice: $("notice"), audio: $("agent-audio"), transcript: $("transcript"), partial: $("partial"),
  say: $("say"), sayText: $("say-text"), saySend: $("say-send"), timings: $("timings"),
  token: $("token"), tokenClear: $("token-clear"), devLogin: $("dev-login"), devName: $("dev-name"),
};

const listeners = new Map();
window.voicegate = {
  on(type, handler) { (listeners.get(type) || listeners.set(type, []).get(type)).push(handler); },
  token: () => ui.token.value.trim(),
};

let call = null; // the live call: {pc, channel, mic, location, hungUp, resumeAttempts}

// ---- small view helpers ---------------------------------------------------------------------------

function setPill(el, state, text) {
  el.dataset.state = state;
  el.textContent = text;
}

function notify(message) {
  ui.notice.textContent = message || "";
  ui.notice.hidden = !message;
}

function appendLine(role, text, extraClass) {
  const empty = ui.transcript.querySelector(".empty");
  if (empty) empty.remove();
  const item = document.createElement("li");
  item.className = `line ${role}${extraClass ? " " + extraClass : ""}`;
  const who = document.createElement("span");
  who.className = "who";
  who.textContent = role === "user" ? "You" : role === "agent" ? "Agent" : "•";
  const said = document.createElement("span");
  said.className = "said";
  said.textContent = text;
  item.append(who, said);
  ui.transcript.append(item);
  item.scrollIntoView({ block: "nearest" });
  return item;
}

function showPartial(text) {
  ui.partial.textContent = text ? `You (so far): ${text}` : "";
  ui.partial.hidden = !text;
}

function setInCall(active) {
  ui.call.hidden = active;
  ui.hangup.hidden = !active;
  ui.call.disabled = false;
  if (!active) setTyping(false);
}

function setTyping(enabled) {
  ui.sayText.disabled = !enabled;
  ui.saySend.disabled = !enabled;
}

// Typing works while the live call's channel is open. Derived from the channel's state rather than
// from which event came last: after a reconnect the old channel's "close" can arrive after the new
// one's "open", and a channel can open before its listeners are attached.
function refreshTyping() {
  setTyping(Boolean(call && call.channel && call.channel.readyState === "open"));
}

// ---- identity -------------------------------------------------------------------------------------

function tokenSubject(token) {
  try {
    const payload = token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    return JSON.parse(atob(payload)).sub || "";
  } catch {
    return "";
  }
}

function showIdentity() {
  const token = window.voicegate.token();
  const subject = token ? tokenSubject(token) : "";
  setPill(ui.who, token ? "signed-in" : "idle", token ? `Token${subject ? ` for ${subject}` : ""}` : "Anonymous");
  if (token) sessionStorage.setItem(TOKEN_KEY, token); else sessionStorage.removeItem(TOKEN_KEY);
  window.dispatchEvent(new Event("voicegate:identity")); // e.g. the memory panel reloads
}

function takeTokenFromUrl() {
  const url = new URL(window.location.href);
  const fromUrl = url.searchParams.get("token");
  if (fromUrl) {
    ui.token.value = fromUrl;
    url.searchParams.delete("token"); // keep the credential out of history and bookmarks
    window.history.replaceState(null, "", url.pathname + url.search + url.hash);
  } else {
    ui.token.value = sessionStorage.getItem(TOKEN_KEY) || "";
  }
  showIdentity();
}

async function offerDevLogin() {
  try {
    const response = await fetch("/dev/token", { cache: "no-store" });
    if (!response.ok) return;
    const status = await response.json();
    ui.devLogin.hidden = !status.can_mint;
  } catch {
    // no dev login on this server
  }
}

async function devSignIn(event) {
  event.preventDefault();
  const name = ui.devName.value.trim();
  if (!name) return;
  const response = await fetch("/dev/token", {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ resource_id: name }),
  });
  if (!response.ok) {
    notify(await errorText(response));
    return;
  }
  ui.token.value = (await response.json()).token;
  sessionStorage.removeItem(RESUME_KEY); // a new identity starts a new conversation
  showIdentity();
  notify("");
}

// ---- signalling -----------------------------------------------------------------------------------

async function errorText(response) {
  let message = `${response.status} ${response.statusText}`;
  try {
    const body = await response.json();
    if (body && body.error && body.error.message) message = body.error.message;
  } catch {
    // not JSON
  }
  const retry = response.headers.get("Retry-After");
  return retry ? `${message} (retry in ${retry} s)` : message;
}

function authHeaders() {
  const token = window.voicegate.token();
  return token ? { Authorization: `Bearer ${token}` } : {};
}

function gatheringComplete(pc) {
  if (pc.iceGatheringState === "complete") return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => { if (pc.iceGatheringState === "complete") { pc.removeEventListener("icegatheringstatechange", done); resolve(); } };
    pc.addEventListener("icegatheringstatechange", done);
    setTimeout(resolve, GATHER_TIMEOUT_MS); // WHIP has no trickle: send what we have by then
  });
}

async function dial(mic) {
  const pc = new RTCPeerConnection();
  const channel = pc.createDataChannel("events");
  for (const track of mic.getAudioTracks()) pc.addTrack(track, mic);
  pc.addEventListener("track", (event) => { ui.audio.srcObject = event.streams[0] || new MediaStream([event.track]); });
  await pc.setLocalDescription(await pc.createOffer());
  await gatheringComplete(pc);

  const stored = JSON.parse(sessionStorage.getItem(RESUME_KEY) || "null");
  const url = stored && stored.token ? `/whip?resume=${encodeURIComponent(stored.token)}` : "/whip";
  const response = await fetch(url, {
    method: "POST", headers: { "Content-Type": "application/sdp", ...authHeaders() }, body: pc.localDescription.sdp,
  });
  if (response.status !== 201) {
    pc.close();
    if (response.status === 401) throw new Error(`Sign-in needed: ${await errorText(response)}`);
    throw new Error(await errorText(response));
  }
  const resumeStatus = response.headers.get("X-Resume-Status") || "new";
  const location = response.headers.get("Location");
  sessionStorage.setItem(RESUME_KEY, JSON.stringify({ token: response.headers.get("X-Resume-Token"), location }));
  await pc.setRemoteDescription({ type: "answer", sdp: await response.text() });
  if (resumeStatus === "expired") appendLine("system", "The previous conversation had ended; this is a new one.", "note");
  if (resumeStatus === "resumed") appendLine("system", "Reconnected: the agent remembers this conversation.", "note");
  return { pc, channel, location, resumeStatus };
}

// ---- the call -------------------------------------------------------------------------------------

async function startCall() {
  notify("");
  ui.call.disabled = true;
  setPill(ui.connection, "connecting", "Connecting…");
  try {
    const mic = await navigator.mediaDevices.getUserMedia({
      audio: { echoCancellation: false, noiseSuppression: false, autoGainControl: false, channelCount: 1 },
    });
    call = { mic, hungUp: false, resumeAttempts: 0 };
    await connect();
    setInCall(true);
  } catch (error) {
    notify(error.message || String(error));
    setPill(ui.connection, "failed", "Not connected");
    stopMic();
    call = null;
    ui.call.disabled = false;
  }
}

async function connect() {
  const { pc, channel, location, resumeStatus } = await dial(call.mic);
  Object.assign(call, { pc, channel, location, resumed: resumeStatus === "resumed" });
  channel.addEventListener("open", refreshTyping);
  channel.addEventListener("close", refreshTyping);
  refreshTyping();
  channel.addEventListener("message", (event) => onServerEvent(event.data));
  pc.addEventListener("connectionstatechange", () => onConnectionState(pc));
  if (resumeStatus === "resumed") setPill(ui.connection, "connecting", "Resuming…");
}

function onConnectionState(pc) {
  if (!call || call.pc !== pc) return;
  const state = pc.connectionState;
  if (state === "connected") {
    call.resumeAttempts = 0;
    showConnected();
  } else if (state === "disconnected") {
    setPill(ui.connection, "connecting", "Reconnecting…"); // the browser may still recover on its own
  } else if (state === "failed") {
    resume();
  }
}

// The peer connection's "connected" and the server's connection event can come in either order; both
// show the same label, so the later one never hides that the conversation was resumed.
function showConnected() {
  setPill(ui.connection, "connected", call && call.resumed ? "Connected (resumed)" : "Connected");
}

async function resume() {
  if (!call || call.hungUp) return;
  if (call.resumeAttempts >= MAX_RESUME_ATTEMPTS) {
    notify("The connection was lost. Press Call to start again.");
    endCall(false);
    return;
  }
  call.resumeAttempts += 1;
  setPill(ui.connection, "connecting", "Reconnecting…");
  call.pc.close();
  try {
    await new Promise((r) => setTimeout(r, 500 * call.resumeAttempts));
    await connect();
  } catch (error) {
    notify(error.message || String(error));
    setTimeout(resume, 1000);
  }
}

async function hangUp() {
  if (!call) return;
  call.hungUp = true;
  const location = call.location;
  const stored = JSON.parse(sessionStorage.getItem(RESUME_KEY) || "null");
  endCall(true);
  if (location) {
    try {
      // An anonymous call is ended only by the client holding its resume token.
      const headers = { ...authHeaders(), ...(stored && stored.token ? { "X-Resume-Token": stored.token } : {}) };
      await fetch(location, { method: "DELETE", headers });
    } catch {
      // the server reaps the session after its grace period anyway
    }
  }
}

function stopMic() {
  if (call && call.mic) for (const track of call.mic.getTracks()) track.stop();
}

function endCall(forget) {
  if (!call) return;
  if (call.pc) call.pc.close();
  stopMic();
  call = null;
  if (forget) sessionStorage.removeItem(RESUME_KEY);
  ui.audio.srcObject = null;
  setPill(ui.connection, "idle", "Not connected");
  setPill(ui.agent, "idle", "Idle");
  showPartial("");
  setInCall(false);
}

// ---- server events --------------------------------------------------------------------------------

const timingColumns = ["stt", "llm_first_token", "tts_first_audio", "first_audio"];
let pendingStt = null; // speech-to-text is timed before its turn is counted: it belongs to the next row

function timingRow(turn) {
  let row = ui.timings.querySelector(`tr[data-turn="${turn}"]`);
  if (!row) {
    row = document.createElement("tr");
    row.dataset.turn = turn;
    const head = document.createElement("th");
    head.scope = "row";
    head.textContent = turn;
    row.append(head, ...timingColumns.map(() => document.createElement("td")));
    ui.timings.prepend(row);
    if (pendingStt !== null) {
      row.children[1].textContent = pendingStt;
      pendingStt = null;
    }
  }
  return row;
}

function recordTiming(event) {
  const ms = Math.round(event.ms).toString();
  if (event.stage === "stt") {
    pendingStt = ms;
    return;
  }
  const column = timingColumns.indexOf(event.stage);
  if (column >= 0 && event.turn) timingRow(String(event.turn)).children[column + 1].textContent = ms;
}

const agentStates = { listening: "Listening", thinking: "Thinking…", speaking: "Speaking" };

let lastUserLine = null; // the caller's line of the turn in progress (a later final may replace it)

function onServerEvent(data) {
  let event;
  try {
    event = JSON.parse(data);
  } catch {
    return;
  }
  switch (event.type) {
    case "transcript":
      if (event.role === "user" && !event.final) {
        showPartial(event.text);
      } else if (event.role === "user" && event.replaces && lastUserLine) {
        // The whole turn heard again after the caller went on: it replaces the half shown before.
        showPartial("");
        lastUserLine.querySelector(".said").textContent = event.text;
      } else {
        if (event.role === "user") showPartial("");
        const line = appendLine(event.role, event.text);
        lastUserLine = event.role === "user" ? line : null;
      }
      break;
    case "response":
      if (event.interrupted) appendLine("system", "(the agent was interrupted)", "note");
      break;
    case "state":
      setPill(ui.agent, event.state, agentStates[event.state] || event.state);
      break;
    case "timing":
      recordTiming(event);
      break;
    case "dtmf":
      appendLine("system", `Keypad: ${event.masked ? "(a key, hidden while digits are collected)" : event.digit}`, "note");
      break;
    case "connection":
      if (event.state === "ended") {
        appendLine("system", `Call ended${event.reason ? `: ${event.reason}` : ""}.`, "note");
        endCall(true);
      } else {
        if (event.state === "resumed" && call) call.resumed = true;
        showConnected();
      }
      break;
    default:
      break;
  }
  for (const handler of listeners.get(event.type) || []) {
    try { handler(event); } catch (error) { console.error(error); }
  }
}

function sendTyped(event) {
  event.preventDefault();
  const text = ui.sayText.value.trim();
  if (!text || !call || !call.channel || call.channel.readyState !== "open") return;
  call.channel.send(JSON.stringify({ type: "text", text }));
  ui.sayText.value = "";
}

// ---- wiring ---------------------------------------------------------------------------------------

ui.call.addEventListener("click", startCall);
ui.hangup.addEventListener("click", hangUp);
ui.say.addEventListener("submit", sendTyped);
ui.token.addEventListener("change", showIdentity);
ui.tokenClear.addEventListener("click", () => { ui.token.value = ""; sessionStorage.removeItem(RESUME_KEY); showIdentity(); });
ui.devLogin.addEventListener("submit", devSignIn);
window.addEventListener("pagehide", () => { if (call && call.pc) call.pc.close(); }); // keep the resume token
takeTokenFromUrl();
offerDevLogin();
