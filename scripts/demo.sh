#!/usr/bin/env bash
# Sets up (scripts/setup.sh), then the main job: an NPC (the village blacksmith, played by the
# bundled SmolLM2-135M-Instruct) streams a reply to a player's line, and a greedy completion;
# then the Godot demo (demo_project) runs headless with a scripted village conversation.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
.venv/bin/geist chat --say "${1:-Good morning! Can you repair my sword before nightfall?}" \
    --temperature 0.7 --seed 7 --max-tokens 64
.venv/bin/geist run "The capital of France is" --max-tokens 16 --ids
# The same NPCs inside Godot: Geist Village, headless, with a scripted conversation.
GODOT=$(scripts/setup_godot.sh 2>/dev/null | tail -n1 || true)
if [ -n "$GODOT" ] && [ -x "$GODOT" ]; then
    "$GODOT" --headless --path demo_project -- --chat-demo 2>&1 | grep -v '^Godot Engine'
fi
