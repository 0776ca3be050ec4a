# The game's thread when NPCs talk: how long say() takes and how long one frame's event drain
# takes, with N sessions (default 8) each holding a conversation of T turns (default 30). Run by
# tests/bench/bench_godot_main_thread.py (which makes a project around this script):
#   godot --headless --path PROJECT --script res://bench_main_thread.gd -- --model M [--npcs 8]
#         [--turns 30] [--max-tokens 16] [--cap 256] [--json OUT]
extends SceneTree

var npcs := 8
var turns := 30
var max_tokens := 16
var cap := 256
var model_path := ""
var json_out := ""
const LINES := ["Can you fix my sword?", "How much will it cost?", "Do you have any shields?",
	"Where can I find iron ore?", "Who lives in the castle?", "Is the forest dangerous?",
	"What is your favourite tool?", "Have you seen a dragon?", "Can I sleep here tonight?",
	"Do you know the innkeeper?"]


func _init() -> void:
	var args := OS.get_cmdline_user_args()
	for i in range(args.size() - 1):
		match args[i]:
			"--model": model_path = args[i + 1]
			"--npcs": npcs = int(args[i + 1])
			"--turns": turns = int(args[i + 1])
			"--max-tokens": max_tokens = int(args[i + 1])
			"--cap": cap = int(args[i + 1])
			"--json": json_out = args[i + 1]
	run.call_deferred()


func stats_of(xs: Array) -> Dictionary:
	var v := xs.duplicate()
	v.sort()
	if v.is_empty():
		return {"n": 0}
	return {"n": v.size(), "median": v[v.size() / 2],
		"p99": v[mini(v.size() - 1, int(ceil(0.99 * v.size())) - 1)], "max": v[v.size() - 1]}


func run() -> void:
	var model := GeistModel.new()
	if model.load_file(model_path) != OK:
		print("cannot load ", model_path, ": ", model.get_error())
		quit(2)
		return
	var sessions: Array[GeistSession] = []
	for i in npcs:
		sessions.append(model.create_session(cap, {"temperature": 0.0, "max_tokens": max_tokens,
			"system": "You are NPC number %d of the village. Answer in one short sentence." % i}))
	var say_ms: Array[float] = []
	var say_by_turn: Array = []
	var replies := 0
	var failed := 0
	for s in sessions:
		s.failed.connect(func(_m: String) -> void: failed += 1)
	var t_all := Time.get_ticks_msec()
	for turn in turns:
		var this_turn: Array[float] = []
		for i in npcs:
			var t0 := Time.get_ticks_usec()
			var rc: int = sessions[i].say(LINES[(turn + i) % LINES.size()])
			var dt := (Time.get_ticks_usec() - t0) / 1000.0
			if rc != OK:
				print("say() failed: ", rc, " ", sessions[i].get_error())
				quit(3)
				return
			say_ms.append(dt)
			this_turn.append(dt)
		say_by_turn.append(stats_of(this_turn).get("median", 0.0))
		# the engine drains its events once a frame on this thread and times each drain
		while true:
			var busy := false
			for s in sessions:
				busy = busy or s.is_busy()
			if not busy:
				break
			await process_frame
		replies += npcs
	var out := {"npcs": npcs, "turns": turns, "cap": cap, "max_tokens": max_tokens,
		"replies": replies, "failed": failed, "wall_s": (Time.get_ticks_msec() - t_all) / 1000.0,
		"say_ms": stats_of(say_ms), "say_ms_median_by_turn": say_by_turn,
		"drain_ms": {"n": GeistEngine.stats().get("drains_with_events", -1),
			"median": GeistEngine.stats().get("drain_busy_median_ms", -1.0),
			"p99": GeistEngine.stats().get("drain_busy_p99_ms", -1.0),
			"max": GeistEngine.stats().drain_max_ms},
		"last_stats": sessions[0].last_stats(), "tokens_used": sessions[0].tokens_used}
	print(JSON.stringify(out))
	if json_out != "":
		var f := FileAccess.open(json_out, FileAccess.WRITE)
		f.store_string(JSON.stringify(out, "  "))
	quit(0 if failed == 0 else 1)
