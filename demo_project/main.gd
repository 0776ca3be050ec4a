# Geist Village: three NPCs with their own personas and KV caps, a dialogue UI, and two headless
# modes:
#   godot --headless --path demo_project -- --ai-bench [--npcs N] [--tokens T] [--threads K]
#         [--json FILE] [--model PATH] [--fps F] [--budget MS] [--backend NAME] [--device D]
#         [--fast] (vulkan: one NPC's decode steps on float activations, GEIST_DEVICE_FAST)
#     All NPCs say their line in the same frame; the runtime runs them together (batched decode).
#     Timings come from each session's last_stats(), measured on the main thread when it drains
#     the events (one-frame resolution): prefill = submit -> first token, decode = first token ->
#     finished. Since the NPCs overlap, the rates use wall-clock windows, not sums:
#       prefill_tokens_per_s = all prompt tokens / the slowest NPC's time to its first token
#       decode_tokens_per_s  = all generated tokens / (last finish - earliest first token)
#       decode_tokens_per_s_per_npc = mean over NPCs of generated / its own decode_ms
#       aggregate_tokens_per_s = all generated tokens / the whole wall time (prefills included)
#   godot --headless --path demo_project -- --chat-demo [--model PATH]   (scripted conversation)
# In the dialogue UI and the chat demo Bram the blacksmith (blacksmith.gd) can hand the player an
# item through an NPC action; the bench uses plain NPCs.
extends Control

const Blacksmith := preload("res://blacksmith.gd")
const DEFAULT_MODEL := "res://models/model.gguf"
const VILLAGERS := [
	{"name": "Bram", "cap": 128, "color": Color(0.85, 0.55, 0.3),
	 "persona": "You are Bram, the village blacksmith. Gruff but kind. One short sentence."},
	{"name": "Mira", "cap": 256, "color": Color(0.9, 0.8, 0.4),
	 "persona": "You are Mira, the baker. Cheerful, loves gossip. Answer in one or two sentences."},
	{"name": "Old Tova", "cap": 512, "color": Color(0.5, 0.7, 0.9),
	 "persona": "You are Tova, the village elder. You speak in riddles and remember old legends."},
]
const LINES := [
	"Good morning! Can you repair my sword before nightfall?",
	"What smells so good in here today?",
	"Is there any legend about the old well?",
	"Have you seen any travellers on the road?",
]

var args := {}
var model: GeistModel
var npcs: Array[GeistNPC] = []
var frame_us: Array[int] = []
var last_frame_us := 0
var measuring := false
var log_label: RichTextLabel
var input: LineEdit
var picker: OptionButton


func _ready() -> void:
	args = parse_args(OS.get_cmdline_user_args())
	if args.has("ai-bench"):
		bench.call_deferred()
	elif args.has("chat-demo"):
		chat_demo.call_deferred()
	else:
		build_ui()


func parse_args(a: PackedStringArray) -> Dictionary:
	var out := {}
	var i := 0
	while i < a.size():
		var k := a[i]
		if k.begins_with("--"):
			k = k.substr(2)
			if i + 1 < a.size() and not a[i + 1].begins_with("--"):
				out[k] = a[i + 1]
				i += 1
			else:
				out[k] = true
		i += 1
	return out


func model_path() -> String:
	return str(args.get("model", DEFAULT_MODEL))


func load_model() -> Dictionary:
	# The game owns the bytes: read once, then the model aliases them (no copy).
	var t0 := Time.get_ticks_usec()
	var bytes := FileAccess.get_file_as_bytes(model_path())
	var t1 := Time.get_ticks_usec()
	model = GeistModel.new()
	var rc := model.load_from_buffer(bytes)
	var t2 := Time.get_ticks_usec()
	return {"rc": rc, "read_ms": (t1 - t0) / 1000.0, "load_ms": (t2 - t1) / 1000.0,
		"size": bytes.size()}


func make_npc(i: int, tokens: int, with_actions: bool = false) -> GeistNPC:
	var v: Dictionary = VILLAGERS[i % VILLAGERS.size()]
	var npc: GeistNPC = Blacksmith.new() if with_actions and i == 0 else GeistNPC.new()
	npc.name = "%s_%d" % [v.name.replace(" ", ""), i]
	npc.model = model
	npc.persona = v.persona
	npc.max_seq_len = maxi(v.cap, Blacksmith.MIN_CAP) if npc is Blacksmith else v.cap
	npc.max_tokens = tokens
	npc.temperature = 0.7
	npc.seed = 7 + i
	npc.priority = 1 if i == 0 else 0
	add_child(npc)
	return npc


func _process(_delta: float) -> void:
	var now := Time.get_ticks_usec()
	if measuring and last_frame_us > 0:
		frame_us.append(now - last_frame_us)
	last_frame_us = now


func percentile(sorted: Array, p: float) -> float:
	if sorted.is_empty():
		return 0.0
	var idx := clampi(int(ceil(p * sorted.size())) - 1, 0, sorted.size() - 1)
	return sorted[idx] / 1000.0


func vm_hwm() -> int:
	var f := FileAccess.open("/proc/self/status", FileAccess.READ)
	if f == null:
		return 0
	# /proc files report size 0: read line by line
	while not f.eof_reached():
		var line := f.get_line()
		if line.begins_with("VmHWM:"):
			return int(line.split(":")[1].strip_edges().split(" ")[0]) * 1024
	return 0


func bench() -> void:
	var n_npcs := int(args.get("npcs", 3))
	var tokens := int(args.get("tokens", 32))
	var threads := int(args.get("threads", 1))
	Engine.max_fps = int(args.get("fps", 100))  # 10 ms frames: stalls show up plainly
	var cfg := {"threads": threads}
	if args.has("budget"):
		cfg["budget_ms"] = float(args.budget)
	if args.has("backend"):  # e.g. vulkan: the NPCs' model on the GPU (the default: the CPU)
		cfg["backend"] = str(args.backend)
	if args.has("device"):
		cfg["device"] = str(args.device)
	if args.has("fast"):  # vulkan: one NPC's decode steps on float activations (GEIST_DEVICE_FAST)
		cfg["device_fast"] = true
	var cfg_rc: int = GeistEngine.configure(cfg)
	if cfg_rc != OK:
		printerr("GeistEngine.configure(", cfg, ") failed: ", error_string(cfg_rc))
		get_tree().quit(2)
		return
	var ld := load_model()
	if ld.rc != OK:
		printerr("cannot load ", model_path(), ": ", model.get_error())
		get_tree().quit(2)
		return
	for i in n_npcs:
		npcs.append(make_npc(i, tokens))
	var replies := {}
	for npc in npcs:
		npc.replied.connect(func(t): replies[npc.name] = t)
	# the NPCs' sessions (KV caches allocated up front) are made now, not inside the measurement
	var t_sess := Time.get_ticks_usec()
	for npc in npcs:
		npc.get_session()
	var sessions_ms := (Time.get_ticks_usec() - t_sess) / 1000.0
	await get_tree().process_frame
	measuring = true
	last_frame_us = 0
	var t0 := Time.get_ticks_usec()
	for i in npcs.size():
		npcs[i].say(LINES[i % LINES.size()])
	# say() prepares the prompt on the main thread (template, tokenize, KV prefix): its cost
	# (not in frame_ms: this runs before the first measured frame starts)
	var say_ms := (Time.get_ticks_usec() - t0) / 1000.0
	while replies.size() < npcs.size() and Time.get_ticks_usec() - t0 < 300_000_000:
		await get_tree().process_frame
	var wall_s := (Time.get_ticks_usec() - t0) / 1e6
	measuring = false

	var prompt_tok := 0
	var gen_tok := 0
	var prefill_window_ms := 0.0
	var first_token_min_ms := INF
	var end_max_ms := 0.0
	var per_npc_rate := 0.0
	var reused_tok := 0
	var kv := []
	var res := model.memory()
	var resident := {"weights_aliased": res.weights_aliased, "weights_owned": res.weights_owned,
		"metadata": res.metadata, "tokenizer": res.tokenizer, "rope_tables": res.rope_tables,
		"other": res.other, "kv_cache": 0, "scratch": 0}
	var out_replies := []
	var all_replied := true
	for npc in npcs:
		var s := npc.get_session()
		var st := s.last_stats()
		prompt_tok += st.prompt_tokens
		gen_tok += st.generated_tokens
		reused_tok += st.reused_tokens
		prefill_window_ms = max(prefill_window_ms, st.prefill_ms)
		first_token_min_ms = min(first_token_min_ms, st.prefill_ms)
		end_max_ms = max(end_max_ms, st.prefill_ms + st.decode_ms)
		per_npc_rate += st.generated_tokens / max(st.decode_ms / 1000.0, 1e-9) / n_npcs
		var m := s.memory()
		resident.kv_cache += m.kv_cache
		resident.scratch += m.scratch + m.other
		kv.append({"npc": str(npc.name), "max_seq_len": npc.max_seq_len,
			"kv_mode": ["f32", "f16", "int8", "int4", "kivi2"][npc.kv_mode], "kv_bytes": m.kv_cache})
		var text: String = replies.get(npc.name, "")
		all_replied = all_replied and text.strip_edges() != ""
		out_replies.append({"npc": str(npc.name), "reply": text, "tokens": st.generated_tokens,
			"prompt_tokens": st.prompt_tokens, "prefill_ms": st.prefill_ms,
			"decode_ms": st.decode_ms})
	var sorted := frame_us.duplicate()
	sorted.sort()
	var info := model.info()
	var result := {
		"model": model_path().get_file(),
		"architecture": info.get("architecture", ""),
		"backend": info.get("backend", ""),
		"device": GeistEngine.stats().get("device", ""),
		"device_fast": GeistEngine.stats().get("device_fast", 0) != 0,
		"renderer": RenderingServer.get_video_adapter_name(),
		"threads": threads,
		"runtime": GeistEngine.stats().runtime,
		"npcs": n_npcs,
		"tokens_per_npc": tokens,
		"load_time_ms": ld.load_ms,
		"read_time_ms": ld.read_ms,
		"runtime_options": {"budget_ms": GeistEngine.stats().budget_ms,
			"period_ms": GeistEngine.stats().period_ms,
			"prefill_chunk": GeistEngine.stats().prefill_chunk,
			"max_batch": GeistEngine.stats().max_batch},
		"prefill_tokens_per_s": prompt_tok / max(prefill_window_ms / 1000.0, 1e-9),
		"decode_tokens_per_s": gen_tok / max((end_max_ms - first_token_min_ms) / 1000.0, 1e-9),
		"decode_tokens_per_s_per_npc": per_npc_rate,
		"reused_prompt_tokens": reused_tok,
		"aggregate_tokens_per_s": gen_tok / max(wall_s, 1e-9),
		"prompt_tokens": prompt_tok,
		"generated_tokens": gen_tok,
		"wall_s": wall_s,
		"peak_rss_bytes": vm_hwm(),
		"resident_bytes": resident,
		"kv_bytes_per_npc": kv,
		"frame_ms": {"median": percentile(sorted, 0.5), "p99": percentile(sorted, 0.99),
			"max": percentile(sorted, 1.0), "frames": sorted.size(),
			"target_fps": Engine.max_fps},
		"main_thread_say_ms": say_ms,
		"create_sessions_ms": sessions_ms,
		"main_thread_drain_ms": {"max": GeistEngine.stats().drain_max_ms,
			"mean": GeistEngine.stats().drain_mean_ms},
		"replies": out_replies,
		"all_replied": all_replied,
	}
	var text := JSON.stringify(result, "  ")
	print(text)
	if args.has("json"):
		var f := FileAccess.open(str(args.json), FileAccess.WRITE)
		if f:
			f.store_string(text + "\n")
			f.close()
	get_tree().quit(0 if all_replied else 1)


func chat_demo() -> void:
	Engine.max_fps = 60
	var ld := load_model()
	if ld.rc != OK:
		printerr("cannot load ", model_path(), ": ", model.get_error())
		get_tree().quit(2)
		return
	print("Geist Village (model %s, %d MB, loaded in %.1f ms from a PackedByteArray)"
		% [model_path().get_file(), ld.size / 1048576, ld.load_ms])
	var ok := true
	var bram: Blacksmith = null
	for i in VILLAGERS.size():
		var npc := make_npc(i, 48, true)
		if i == 0:
			bram = npc as Blacksmith
		var line: String = LINES[i]
		print("\nPlayer -> %s: %s" % [VILLAGERS[i].name, line])
		printraw("%s: " % VILLAGERS[i].name)
		npc.token.connect(func(p): printraw(p))
		var reply = await npc.say(line)
		print("")
		ok = ok and str(reply) != ""
		var st := npc.get_session().last_stats()
		print("  [%d tokens, %.1f tok/s, KV %d KB for a cap of %d]" % [st.generated_tokens,
			st.generated_tokens / max(st.decode_ms / 1000.0, 1e-9),
			npc.memory().kv_cache / 1024, npc.max_seq_len])
	# the blacksmith's action: asked for a sword, he hands one over (a call is required here)
	var line := "Please give me a sword, I must fight the wolves tonight."
	print("\nPlayer -> %s: %s" % [VILLAGERS[0].name, line])
	bram.action_choice = GeistNPC.ACTION_REQUIRED
	bram.max_tokens = 96  # a line of speech and the call
	bram.item_given.connect(func(item: String, count: int) -> void:
		print("  [%s hands you %d x %s]" % [VILLAGERS[0].name, count, item]))
	printraw("%s: " % VILLAGERS[0].name)
	var answer: String = await bram.say(line)
	print("\n  inventory from Bram: ", bram.given)
	ok = ok and (answer != "" or not bram.given.is_empty())
	get_tree().quit(0 if ok else 1)


# ---- normal play: a small dialogue UI ------------------------------------------------------

func build_ui() -> void:
	var ld := load_model()
	var bg := ColorRect.new()
	bg.color = Color(0.18, 0.24, 0.16)
	bg.set_anchors_preset(Control.PRESET_FULL_RECT)
	add_child(bg)
	var box := VBoxContainer.new()
	box.set_anchors_preset(Control.PRESET_FULL_RECT)
	box.add_theme_constant_override("separation", 8)
	add_child(box)
	var title := Label.new()
	title.text = "Geist Village — talk to the villagers"
	box.add_child(title)
	var houses := HBoxContainer.new()
	box.add_child(houses)
	for i in VILLAGERS.size():
		var v: Dictionary = VILLAGERS[i]
		var b := ColorRect.new()
		b.color = v.color
		b.custom_minimum_size = Vector2(160, 80)
		var l := Label.new()
		l.text = "%s\ncap %d" % [v.name, v.cap]
		b.add_child(l)
		houses.add_child(b)
	log_label = RichTextLabel.new()
	log_label.size_flags_vertical = Control.SIZE_EXPAND_FILL
	log_label.scroll_following = true
	box.add_child(log_label)
	var row := HBoxContainer.new()
	box.add_child(row)
	picker = OptionButton.new()
	for v in VILLAGERS:
		picker.add_item(v.name)
	row.add_child(picker)
	input = LineEdit.new()
	input.placeholder_text = "Say something..."
	input.size_flags_horizontal = Control.SIZE_EXPAND_FILL
	input.text_submitted.connect(_on_submit)
	row.add_child(input)
	if ld.rc != OK:
		log_label.append_text("[color=red]Cannot load %s: %s[/color]\nRun scripts/setup.sh.\n"
			% [model_path(), model.get_error()])
		return
	for i in VILLAGERS.size():
		var npc := make_npc(i, 48, true)
		npcs.append(npc)
		npc.token.connect(func(p): log_label.append_text(p))
		if i == 0:
			(npc as Blacksmith).item_given.connect(func(item: String, count: int) -> void:
				log_label.append_text("\n[color=yellow](%s hands you %d x %s)[/color]"
					% [VILLAGERS[0].name, count, item]))
		npc.failed.connect(func(m): log_label.append_text("[color=red](%s)[/color]" % m))


func _on_submit(text: String) -> void:
	var npc := npcs[picker.selected]
	if text.strip_edges() == "" or npc.is_busy():
		return
	input.clear()
	log_label.append_text("\n[b]You:[/b] %s\n[b]%s:[/b] " % [text, VILLAGERS[picker.selected].name])
	await npc.say(text)
	log_label.append_text("\n")
