// The "What this offline agent understands" panel. The list comes from GET /api/agent, which asks the
// agent itself (LocalAgent.understands), so the page never lists a phrase the agent would not act on.
// Another language model has no such list: the panel stays hidden.

const $ = (id) => document.getElementById(id);
const needsNote = {
  memory: "needs memory",
  phone: "phone calls only",
};

function item(capability) {
  const li = document.createElement("li");
  li.dataset.intent = capability.intent;
  const example = document.createElement("q");
  example.textContent = capability.example;
  li.append(example);
  if (capability.needs) {
    const note = document.createElement("span");
    note.className = "needs";
    note.textContent = ` (${needsNote[capability.needs] || capability.needs})`;
    li.append(note);
  }
  if (!capability.available) li.classList.add("unavailable");
  return li;
}

async function load() {
  const panel = $("agent-panel");
  let body;
  try {
    const response = await fetch("/api/agent", { cache: "no-store" });
    if (!response.ok) return;
    body = await response.json();
  } catch {
    return; // the panel is a hint, not part of the call: without it the page works the same
  }
  if (!Array.isArray(body.understands)) return;
  $("agent-understands").replaceChildren(...body.understands.map(item));
  panel.hidden = false;
}

load();
