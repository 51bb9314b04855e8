// The memory panel: what the agent remembers about the signed-in caller, editable line by line.
// Every edit is an exact replacement sent with the revision it was made against; when the memory changed
// meanwhile (409), the panel reloads and says so instead of overwriting. It reloads on memory.changed
// (from the call's DataChannel or the /api/events socket), whenever a call (re)connects and whenever the
// /api/events socket (re)opens: a change made while that socket was down sent no event to this page.

import { EventsSocket } from "./events.js";

const $ = (id) => document.getElementById(id);
const ui = {
  panel: $("memory-panel"), status: $("memory-status"), reload: $("memory-reload"),
  user: $("memory-user"), memory: $("memory-memory"), notice: $("memory-notice"), live: $("memory-live"),
};
const documentNames = { user: "Preferences", memory: "Facts and past calls" };
let state = null; // {documents: {user: {content, revision}, memory: {...}}, limits}
let loads = 0; // loads overlap (an event, a reconnect, a click): only the latest one's answer is shown

const token = () => (window.voicegate ? window.voicegate.token() : "");
const headers = () => ({ "Content-Type": "application/json", Authorization: `Bearer ${token()}` });

function say(message, kind = "info") {
  ui.notice.textContent = message;
  ui.notice.dataset.kind = kind;
  ui.notice.hidden = !message;
}

async function errorMessage(response) {
  try {
    const body = await response.json();
    return (body.error && body.error.message) || response.statusText;
  } catch {
    return response.statusText;
  }
}

const editing = () => Boolean(ui.panel.querySelector(".memory-edit"));

function changedSince(fresh) {
  return !state || ["user", "memory"].some((scope) => fresh.documents[scope].revision !== state.documents[scope].revision);
}

export async function load(message = "") {
  const mine = ++loads;
  if (!token()) {
    state = null;
    render();
    ui.status.textContent = "Sign in (a token) to see what the agent remembers about you.";
    events.follow("");
    return;
  }
  let response;
  try {
    response = await fetch("/api/memory", { headers: headers(), cache: "no-store" });
  } catch {
    if (mine === loads) ui.status.textContent = "Could not reach the server; the panel reloads when it is back.";
    return;
  }
  if (mine !== loads) return;
  if (response.status === 404) {
    ui.panel.hidden = true; // memory is off on this server
    return;
  }
  ui.panel.hidden = false;
  if (!response.ok) {
    state = null;
    render();
    ui.status.textContent = await errorMessage(response);
    return;
  }
  const fresh = await response.json();
  if (mine !== loads) return;
  if (editing()) {
    // The person is editing a line: keep their form and the revision it was made against. If they save
    // after a change, that revision gets a 409 and the panel reloads then, with a message, instead of
    // silently overwriting the newer memory.
    if (changedSince(fresh)) say("Your memory changed while you were editing; saving will ask you to try again.", "warn");
  } else {
    state = fresh;
    render();
    say(message, message ? "warn" : "info");
  }
  events.follow(token());
}

function lines(content) {
  return content.split("\n").filter((line) => line.trim() !== "");
}

function render() {
  for (const scope of ["user", "memory"]) {
    const list = ui[scope];
    list.replaceChildren();
    const doc = state && state.documents[scope];
    if (!doc) continue;
    const items = lines(doc.content);
    if (!items.length) {
      const empty = document.createElement("li");
      empty.className = "empty";
      empty.textContent = "Nothing yet.";
      list.append(empty);
    }
    for (const line of items) list.append(lineItem(scope, line));
    list.append(addItem(scope));
  }
  if (state) {
    const { user, memory } = state.documents;
    ui.status.textContent = `Preferences revision ${user.revision}, facts revision ${memory.revision}. ` +
      `Each document holds at most ${state.limits.max_chars} characters.`;
  }
}

function button(text, onClick, className = "") {
  const element = document.createElement("button");
  element.type = "button";
  element.textContent = text;
  element.className = className;
  element.addEventListener("click", onClick);
  return element;
}

function lineItem(scope, line) {
  const item = document.createElement("li");
  item.className = "memory-line";
  const text = document.createElement("span");
  text.textContent = line;
  const edit = button("Edit", () => startEdit(item, scope, line));
  edit.setAttribute("aria-label", `Edit: ${line}`);
  const remove = button("Delete", () => patch(scope, { action: "replace", old_text: line, new_text: "" }), "danger");
  remove.setAttribute("aria-label", `Delete: ${line}`);
  item.append(text, edit, remove);
  return item;
}

function startEdit(item, scope, line) {
  const form = document.createElement("form");
  form.className = "memory-edit";
  const input = document.createElement("input");
  input.value = line;
  input.setAttribute("aria-label", "New text");
  const save = document.createElement("button");
  save.type = "submit";
  save.textContent = "Save";
  form.append(input, save, button("Cancel", () => { form.remove(); load(); }));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    patch(scope, { action: "replace", old_text: line, new_text: input.value });
  });
  item.replaceChildren(form);
  input.focus();
}

function addItem(scope) {
  const item = document.createElement("li");
  const form = document.createElement("form");
  form.className = "memory-add";
  const input = document.createElement("input");
  input.placeholder = scope === "user" ? "e.g. - Keep replies short." : "e.g. - Prefers email over calls.";
  input.setAttribute("aria-label", `Add to ${documentNames[scope]}`);
  const add = document.createElement("button");
  add.type = "submit";
  add.textContent = "Add";
  form.append(input, add);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    if (input.value.trim()) patch(scope, { action: "append", content: input.value.trim() });
  });
  item.append(form);
  return item;
}

async function patch(scope, edit) {
  if (!state) return;
  const body = { document: scope, ...edit, expectedRevision: state.documents[scope].revision };
  const response = await fetch("/api/memory", { method: "PATCH", headers: headers(), body: JSON.stringify(body) });
  if (response.status === 409) {
    ui.panel.querySelectorAll(".memory-edit").forEach((form) => form.remove());
    await load("Your memory changed somewhere else, so it was reloaded. Please make your change again.");
    return;
  }
  if (!response.ok) {
    say(await errorMessage(response), "error");
    return;
  }
  state = await response.json();
  render();
  say("Saved.");
}

const liveText = {
  connecting: () => "Connecting for live updates…",
  open: () => "Live: changes made in a call or another tab show up here.",
  retrying: (ms) => `Live updates interrupted; reconnecting in ${Math.ceil(ms / 1000)} s.`,
};

function showLive(live, retryMs) {
  ui.live.dataset.state = live;
  ui.live.hidden = live === "off";
  ui.live.textContent = live === "off" ? "" : liveText[live](retryMs);
}

const events = new EventsSocket({
  onOpen: () => load(),
  onEvent: (event) => { if (event.type === "memory.changed") load(); },
  onState: showLive,
});

if (window.voicegate) {
  window.voicegate.on("memory.changed", () => load());
  window.voicegate.on("connection", () => load());
}
ui.reload.addEventListener("click", () => load());
$("token").addEventListener("change", () => load());
window.addEventListener("voicegate:identity", () => load());
load();
