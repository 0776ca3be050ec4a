# Headless tests of the geist Godot extension. Run by tests/godot/test_godot.py:
#   godot --headless --path PROJECT --script res://test_geist.gd -- --model /path/model.gguf
# Exit code = number of failed checks.
extends SceneTree

var failures := 0
var checks := 0
var model_path := ""
var main_tid := 0


func check(cond: bool, what: String) -> void:
	checks += 1
	if cond:
		print("  ok   ", what)
	else:
		failures += 1
		print("  FAIL ", what)


func wait_until(cond: Callable, timeout_s: float = 30.0) -> bool:
	var t0 := Time.get_ticks_msec()
	while not cond.call():
		if Time.get_ticks_msec() - t0 > timeout_s * 1000.0:
			return false
		await process_frame
	return true


func _init() -> void:
	Engine.max_fps = 120  # leave the second core to the worker
	var args := OS.get_cmdline_user_args()
	var i := args.find("--model")
	if i >= 0 and i + 1 < args.size():
		model_path = args[i + 1]
	main_tid = OS.get_main_thread_id()
	run.call_deferred()


func run() -> void:
	if model_path == "" or not FileAccess.file_exists(model_path):
		print("no model: pass -- --model PATH")
		quit(100)
		return
	var only := OS.get_cmdline_user_args()
	var tests := ["buffer_load", "load_file", "pck", "bad_models", "two_sessions", "cancel",
		"snapshot", "over_cap", "free_mid_generation", "npc", "kv_reuse", "trim", "kv_modes",
		"busy_queue", "all_replied", "free_with_queue", "errors", "resource_loader", "sampler",
		"context_policy", "warnings"]
	var t_all := Time.get_ticks_msec()
	# device_fast says whether it is in effect: asked for on a CPU backend, it is not
	check(GeistEngine.configure({"device_fast": true}) == OK, "configure device_fast")
	var st: Dictionary = GeistEngine.stats()
	check(int(st.device_fast) == (1 if str(st.device) != "" else 0),
		"device_fast in effect only on a device (%s)" % st.backend)
	check(GeistEngine.configure({"device_fast": false}) == OK, "configure device_fast back")
	var model := GeistModel.new()
	var bytes := FileAccess.get_file_as_bytes(model_path)
	check(model.load_from_buffer(bytes) == OK, "load_from_buffer OK: " + model.get_error())
	for t in tests:
		if only.has("--only") and not only.has(t):
			continue
		print("[", t, "]")
		var t0 := Time.get_ticks_msec()
		await call("test_" + t, model, bytes)
		print("  (", Time.get_ticks_msec() - t0, " ms)")
	print("%d checks, %d failed, %d ms" % [checks, failures, Time.get_ticks_msec() - t_all])
	quit(failures)


func test_buffer_load(model: GeistModel, bytes: PackedByteArray) -> void:
	var mem := model.memory()
	var size := bytes.size()
	print("  memory: ", mem)
	check(mem.weights_owned == 0, "no weight bytes copied")
	check(mem.weights_aliased > size * 0.9, "weights aliased in the PackedByteArray")
	print("  owned total incl. tokenizer tables: %d bytes = %.2f%% of the file"
		% [mem.owned_total, 100.0 * mem.owned_total / size])
	check(mem.owned_total < size * 0.02, "owned bytes < 2%% of the file (%d)" % mem.owned_total)
	check(model.info().get("architecture") == "llama", "info() has the architecture")


func test_load_file(_model: GeistModel, bytes: PackedByteArray) -> void:
	var m := GeistModel.new()
	check(m.load_file(model_path) == OK, "load_file(absolute) OK")
	check(str(m.memory().source).begins_with("mapped"), "load_file maps the file")
	check(m.memory().mapped_file == bytes.size(), "mapping covers the file")
	if FileAccess.file_exists("res://model.gguf"):
		var r := GeistModel.new()
		check(r.load_file("res://model.gguf") == OK, "load_file(res://) OK: " + r.get_error())
		var r2 := GeistModel.new()
		r2.model_path = "res://model.gguf"
		check(r2.is_loaded(), "setting the path property loads the model")


# An exported game's res:// lives in its .pck: no file on disk to map, so load_file reads the
# model once into a buffer the model owns and aliases. Packs the model with PCKPacker (what an
# export writes), mounts the pack and loads from its res:// path.
func test_pck(model: GeistModel, bytes: PackedByteArray) -> void:
	var pck_path := OS.get_user_data_dir().path_join("geist_test.pck")
	var packer := PCKPacker.new()
	check(packer.pck_start(pck_path) == OK, "pck_start")
	check(packer.add_file("res://packed/npc_model.gguf", model_path) == OK, "model added to the pack")
	check(packer.flush() == OK, "pack written")
	check(ProjectSettings.load_resource_pack(pck_path), "pack mounted")
	var in_pack := "res://packed/npc_model.gguf"
	check(FileAccess.file_exists(in_pack), "the model is visible at " + in_pack)
	check(not FileAccess.file_exists(ProjectSettings.globalize_path(in_pack)),
		"and not on disk (so it cannot be mapped)")
	var m := GeistModel.new()
	check(m.load_file(in_pack) == OK, "load_file from the .pck OK: " + m.get_error())
	var mem := m.memory()
	print("  memory: ", mem)
	check(".pck" in str(mem.source), "source names the .pck: " + str(mem.source))
	check(mem.weights_owned == 0 and mem.weights_aliased > bytes.size() * 0.9,
		"one copy of the weights: the model's buffer, aliased")
	check(m.load_file("res://packed/missing.gguf") != OK and m.get_error() != "",
		"a missing file in the pack: error '%s'" % m.get_error())
	check(m.load_file(in_pack) == OK, "and the model loads again after that")
	var opts := {"temperature": 0.0, "max_tokens": 12}
	var replies := []
	for src: GeistModel in [model, m]:
		var s := src.create_session(128, opts)
		var r := [null]
		s.finished.connect(func(t): r[0] = t)
		s.say("Where is the nearest inn?")
		await wait_until(func(): return r[0] != null)
		replies.append(r[0])
	print("  from the buffer: ", replies[0], "\n  from the .pck:   ", replies[1])
	check(replies[0] != "" and replies[0] == replies[1], "the .pck model replies the same")


func test_bad_models(_model: GeistModel, bytes: PackedByteArray) -> void:
	var m := GeistModel.new()
	var rc := m.load_from_buffer(bytes.slice(0, 4096))
	check(rc != OK and m.get_error() != "", "truncated model: error %d '%s'" % [rc, m.get_error()])
	check(not m.is_loaded(), "truncated model is not loaded")
	var rng := RandomNumberGenerator.new()
	rng.seed = 1234
	var junk := PackedByteArray()
	junk.resize(65536)
	for i in junk.size():
		junk[i] = rng.randi() & 0xff
	rc = m.load_from_buffer(junk)
	check(rc != OK and m.get_error() != "", "random bytes: error %d '%s'" % [rc, m.get_error()])
	var head := bytes.slice(0, 64)  # a real GGUF header, then nothing
	check(m.load_from_buffer(head) != OK, "header-only model: error " + m.get_error())
	check(m.load_file("/nonexistent/x.gguf") != OK, "missing file: error " + m.get_error())
	check(m.create_session(64, {}) == null, "no session from an unloaded model")
	check(m.load_from_buffer(PackedByteArray()) != OK, "empty buffer: error")


func test_two_sessions(model: GeistModel, _bytes: PackedByteArray) -> void:
	var a := model.create_session(256, {"temperature": 0.0, "max_tokens": 12})
	var b := model.create_session(256, {"temperature": 0.0, "max_tokens": 12})
	var order: Array[String] = []
	var tids := {}
	var done := {"a": "", "b": ""}
	a.token.connect(func(_p): order.append("a"); tids[OS.get_thread_caller_id()] = true)
	b.token.connect(func(_p): order.append("b"); tids[OS.get_thread_caller_id()] = true)
	a.finished.connect(func(t): done.a = t; tids[OS.get_thread_caller_id()] = true)
	b.finished.connect(func(t): done.b = t; tids[OS.get_thread_caller_id()] = true)
	check(a.say("Tell me about dragons.") == OK, "a.say queued")
	check(b.say("What is bread made of?") == OK, "b.say queued")
	check(a.is_busy() and b.is_busy(), "both busy right after say (non-blocking)")
	var ok = await wait_until(func(): return done.a != "" and done.b != "")
	check(ok, "both sessions finished")
	check(tids.keys() == [main_tid], "every signal on the main thread %s" % [tids.keys()])
	var first_b := order.find("b")
	var last_a := order.rfind("a")
	check(first_b >= 0 and first_b < last_a, "the two replies interleave")
	print("  a: ", done.a, "\n  b: ", done.b)


func test_cancel(model: GeistModel, _bytes: PackedByteArray) -> void:
	var s := model.create_session(256, {"temperature": 0.0, "max_tokens": 200})
	var n := [0]
	var fin := [null]
	s.token.connect(func(_p): n[0] += 1)
	s.finished.connect(func(t): fin[0] = t)
	s.say("Write a long story about a knight.")
	await wait_until(func(): return n[0] >= 2)
	check(s.cancel() == OK, "cancel() OK")
	var ok = await wait_until(func(): return fin[0] != null, 10.0)
	check(ok, "cancelled request ends with finished")
	check(s.last_stats().finish_reason == 3, "finish reason CANCELLED")
	check(s.last_stats().generated_tokens < 20, "stopped early (%d tokens)" % s.last_stats().generated_tokens)
	check(not s.is_busy(), "not busy after cancel")
	check(s.say("Hello") == OK, "usable after cancel")
	await wait_until(func(): return not s.is_busy())


func test_snapshot(model: GeistModel, _bytes: PackedByteArray) -> void:
	var opts := {"temperature": 0.0, "max_tokens": 16, "system": "You are a blacksmith."}
	var a := model.create_session(256, opts)
	a.say("Good morning!")
	await wait_until(func(): return not a.is_busy())
	var snap := a.snapshot()
	check(snap.size() > 0, "snapshot() has %d bytes" % snap.size())
	var f := FileAccess.open("user://npc.snap", FileAccess.WRITE)
	f.store_buffer(snap)
	f.close()
	var used := a.tokens_used
	var r1 := [null]
	a.finished.connect(func(t): r1[0] = t)
	a.say("Can you fix my sword?")
	await wait_until(func(): return r1[0] != null)

	var b := model.create_session(256, {"temperature": 0.0, "max_tokens": 16})
	var loaded := FileAccess.get_file_as_bytes("user://npc.snap")
	check(b.restore(loaded) == OK, "restore() from user:// OK: " + b.get_error())
	check(b.tokens_used == used, "restored session holds %d tokens" % used)
	check(b.get_transcript().size() == 2, "transcript restored")
	var r2 := [null]
	b.finished.connect(func(t): r2[0] = t)
	b.say("Can you fix my sword?")
	await wait_until(func(): return r2[0] != null)
	print("  original: ", r1[0], "\n  restored: ", r2[0])
	check(r1[0] == r2[0], "restored session continues identically")
	check(b.restore(PackedByteArray([1, 2, 3])) != OK, "garbage snapshot refused: " + b.get_error())


func test_over_cap(model: GeistModel, _bytes: PackedByteArray) -> void:
	var s := model.create_session(32, {"max_tokens": 8})
	var msg := [null]
	s.failed.connect(func(m): msg[0] = m)
	s.say("This line is much longer than thirty-two tokens, because it keeps going and going "
		+ "with more and more words about the weather, the harvest and the king's new taxes.")
	var ok = await wait_until(func(): return msg[0] != null, 10.0)
	check(ok, "failed signal for a prompt over the cap")
	print("  message: ", msg[0])
	check(ok and "max_seq_len" in str(msg[0]) and "32" in str(msg[0]), "message names the cap")
	check(not s.is_busy() and s.tokens_used == 0, "session still usable and empty")


func test_free_mid_generation(_model: GeistModel, bytes: PackedByteArray) -> void:
	var m := GeistModel.new()
	m.load_from_buffer(bytes)
	var s := m.create_session(128, {"temperature": 0.0, "max_tokens": 64})
	var n := [0]
	s.token.connect(func(_p): n[0] += 1)
	s.say("Count to twenty.")
	await wait_until(func(): return n[0] >= 2)
	m = null  # the session keeps the model alive
	await process_frame
	check(s.is_busy(), "dropping the model ref does not stop the session")
	var before := int(GeistEngine.stats().sessions)
	s = null  # freed while generating: cancels and waits for the step
	await process_frame
	await process_frame
	check(int(GeistEngine.stats().sessions) == before - 1, "session freed mid-generation")
	# a node freed while it talks
	var m2 := GeistModel.new()
	m2.load_from_buffer(bytes)
	var npc := GeistNPC.new()
	npc.model = m2
	npc.max_tokens = 64
	root.add_child(npc)
	npc.say("Tell me a long tale.")
	await wait_until(func(): return npc.get_session().tokens_used > 0)
	npc.free()
	m2 = null
	for i in 5:
		await process_frame
	check(int(GeistEngine.stats().models) <= 2, "model freed with its last session (%d live)" % GeistEngine.stats().models)


func test_npc(model: GeistModel, _bytes: PackedByteArray) -> void:
	var npc := GeistNPC.new()
	npc.model = model
	npc.persona = "You are Mira, the village baker. Answer in one short sentence."
	npc.max_seq_len = 256
	npc.temperature = 0.0
	npc.max_tokens = 20
	root.add_child(npc)
	var pieces := []
	npc.token.connect(func(p): pieces.append(p))
	var reply = await npc.say("What do you sell?")
	print("  Mira: ", reply)
	check(reply is String and reply != "", "await npc.say() gives the reply")
	check("".join(pieces) == reply, "streamed pieces add up to the reply")
	var mem := npc.save_memory()
	check(mem.size() > 0, "save_memory() %d bytes" % mem.size())
	var other := GeistNPC.new()
	other.model = model
	root.add_child(other)
	check(other.load_memory(mem) != OK, "load_memory() into another persona is refused")
	other.persona = npc.persona
	check(other.load_memory(mem) == OK, "load_memory() OK")
	check(other.get_session().get_transcript().size() == 2, "memory carries the conversation")
	var nomodel := GeistNPC.new()
	root.add_child(nomodel)
	var failed := [null]
	nomodel.failed.connect(func(m): failed[0] = m)
	var r2 = await nomodel.say("hello?")
	check(r2 == "" and failed[0] != null, "NPC without a model fails cleanly: %s" % failed[0])
	npc.queue_free()
	other.queue_free()
	nomodel.queue_free()


func test_kv_reuse(model: GeistModel, _bytes: PackedByteArray) -> void:
	var s := model.create_session(256, {"temperature": 0.0, "max_tokens": 12,
		"system": "You are Bram, the blacksmith."})
	s.say("Good morning!")
	await wait_until(func(): return not s.is_busy())
	var st1 := s.last_stats()
	check(st1.reused_tokens == 0 and st1.prompt_tokens > 0, "first turn runs the whole prompt")
	s.say("Can you fix my sword?")
	await wait_until(func(): return not s.is_busy())
	var st2 := s.last_stats()
	print("  turn 2: ", st2)
	check(st2.finish_reason in [0, 1], "second turn finished")
	check(st2.reused_tokens >= st1.prompt_tokens, "second turn reuses the first turn's KV (%d ids)"
		% st2.reused_tokens)
	check(st2.prompt_tokens < st2.reused_tokens, "only the new part is run (%d ids)"
		% st2.prompt_tokens)
	check(s.tokens_used == st2.reused_tokens + st2.prompt_tokens + st2.generated_tokens,
		"the session holds reused + new + generated ids (%d)" % s.tokens_used)
	check(st2.prefill_ms > 0.0 and st2.decode_ms > 0.0, "per-request timings measured")


func test_trim(model: GeistModel, _bytes: PackedByteArray) -> void:
	var s := model.create_session(96, {"temperature": 0.0, "max_tokens": 16,
		"system": "You are Tova, the village elder."})
	var fails := [0]
	s.failed.connect(func(_m): fails[0] += 1)
	for line in ["Tell me about the old well.", "And the river?", "What about the king?",
			"Goodbye, elder."]:
		s.say(line)
		await wait_until(func(): return not s.is_busy())
	check(fails[0] == 0, "a conversation over the cap keeps going (oldest turns dropped)")
	check(s.get_transcript().size() == 8, "the transcript keeps every turn")
	check(s.tokens_used <= 96, "the session stays within its cap (%d)" % s.tokens_used)
	check(s.last_stats().reused_tokens > 0, "the system prompt's KV is still reused (%d)"
		% s.last_stats().reused_tokens)


func new_npc(model: GeistModel, tokens: int = 8) -> GeistNPC:
	var npc := GeistNPC.new()
	npc.model = model
	npc.persona = "You are Mira, the village baker. Answer in one short sentence."
	npc.temperature = 0.0
	npc.max_tokens = tokens
	root.add_child(npc)
	return npc


# fault 4: every KV mode is reachable (constants, inspector hint, sessions) and documented
func test_kv_modes(model: GeistModel, _bytes: PackedByteArray) -> void:
	var modes := [GeistSession.KV_F32, GeistSession.KV_F16, GeistSession.KV_INT8,
		GeistSession.KV_INT4, GeistSession.KV_KIVI2]
	check(modes == [0, 1, 2, 3, 4], "five KV_* constants")
	for p in ClassDB.class_get_property_list("GeistNPC"):
		if p.name == "kv_mode":
			check(str(p.hint_string).split(",").size() == 5, "the inspector lists five KV modes: "
				+ str(p.hint_string))
	for mode: int in modes:
		var s := model.create_session(64, {"kv_mode": mode})
		check(s != null and int(s.memory().kv_mode) == mode, "a session in KV mode %d" % mode)
		for cap: int in [64, 200]:
			var est := model.session_cost(cap, mode)
			var mem := model.create_session(cap, {"kv_mode": mode}).memory()
			check(est.kv_cache == mem.kv_cache and est.total == mem.total,
				"session_cost(%d, %d) = %d bytes, what a session holds (estimated, not allocated)"
				% [cap, mode, est.total])
	check(GeistSession.FINISH_STOP == 0 and GeistSession.FINISH_LENGTH == 1
		and GeistSession.FINISH_CAPACITY == 2 and GeistSession.FINISH_CANCELLED == 3
		and GeistSession.FINISH_FAILED == -1, "finish reasons as constants")


# fault 5: say() while busy queues the line; each say() resumes with its own reply
func test_busy_queue(model: GeistModel, _bytes: PackedByteArray) -> void:
	var npc := new_npc(model)
	var heard: Array[String] = []
	npc.replied.connect(func(t: String) -> void: heard.append(t))
	var first: Signal = npc.say("What do you sell?")
	var second: Signal = npc.say("And what does it cost?")
	check(npc.get_queued_lines() == 1 and npc.is_busy(), "the second line is queued")
	var r1: String = await first
	check(r1 != "" and heard.size() == 1 and r1 == heard[0],
		"the first await gets the first reply: " + r1)
	var r2: String = await second
	check(r2 != "" and heard.size() == 2 and r2 == heard[1],
		"the second await gets the second reply: " + r2)
	check(npc.get_session().get_transcript().size() == 4, "both turns in the conversation")
	npc.queue_free()


# fault 5: several NPCs at once, whichever finishes first
func test_all_replied(model: GeistModel, _bytes: PackedByteArray) -> void:
	var slow := new_npc(model, 24)
	var fast := new_npc(model, 2)
	slow.say("Tell me about the harvest.")
	fast.say("Hello!")
	var replies: Array = await GeistEngine.all_replied([slow, fast])
	check(replies.size() == 2 and replies[0] != "" and replies[1] != "",
		"all_replied() gives every reply in order: %s" % [replies])
	check(replies[0] == slow.get_last_reply() and replies[1] == fast.get_last_reply(),
		"in the order of the NPCs given")
	var again: Array = await GeistEngine.all_replied([slow, fast])
	check(again == replies, "all_replied() of idle NPCs completes on the next frame")
	slow.queue_free()
	fast.queue_free()


# freeing an NPC mid-reply completes every reply still owed (no await hangs)
func test_free_with_queue(model: GeistModel, _bytes: PackedByteArray) -> void:
	var npc := new_npc(model, 32)
	var got := [null, null]
	npc.say("Tell me a long tale.").connect(func(t: String) -> void: got[0] = t)
	npc.say("And another.").connect(func(t: String) -> void: got[1] = t)
	await process_frame
	npc.free()
	var ok := await wait_until(func() -> bool: return got[0] != null and got[1] != null, 5.0)
	check(ok and got[0] == "" and got[1] == "", "both replies complete (empty) when freed")


# fault 6: errors with messages instead of silent surprises
func test_errors(model: GeistModel, _bytes: PackedByteArray) -> void:
	var npc := new_npc(model)
	await npc.say("Good morning!")
	npc.max_seq_len = 192
	var r: String = await npc.say("What do you sell?")
	var tr := npc.get_session().get_transcript()
	check(r != "" and tr.size() == 4, "changing max_seq_len keeps the conversation (%d)" % tr.size())
	check(npc.get_session().get_max_seq_len() == 192, "and the new cap applies")
	var line: Signal = npc.say("Tell me more.")
	npc.max_seq_len = 64
	check(npc.max_seq_len == 192, "max_seq_len cannot change while the NPC replies")
	await line
	check(model.create_session(64, {"temprature": 0.5}) == null
		and "temprature" in model.get_error(), "unknown option refused: " + model.get_error())
	check(model.create_session(64, {"max_tokens": "lots"}) == null
		and "wrong type" in model.get_error(), "mistyped option refused: " + model.get_error())
	check(model.create_session(64, {"max_tokens": 4}) != null and model.get_error() == "",
		"the model's error is cleared by a success")
	var s := model.create_session(128, {"temperature": 0.0, "max_tokens": 4})
	check(s.say("") == ERR_INVALID_PARAMETER and not s.is_busy(), "say(\"\") is an error: "
		+ s.get_error())
	check(s.chat([{"role": "user"}]) == ERR_INVALID_PARAMETER, "chat() without content: "
		+ s.get_error())
	check(s.chat(["hello"]) == ERR_INVALID_PARAMETER, "chat() with a String item: " + s.get_error())
	check(s.chat([{"role": "wizard", "content": "hi"}]) == ERR_INVALID_PARAMETER,
		"chat() with an unknown role: " + s.get_error())
	check(s.chat([]) == ERR_INVALID_PARAMETER and not s.is_busy(), "chat([]) is an error")
	check(s.configure({"top_q": 1}) == ERR_INVALID_PARAMETER, "configure() checks keys too")
	check(s.say("Hi") == OK and s.get_error() == "", "get_error() is cleared by a success")
	await wait_until(func() -> bool: return not s.is_busy())
	var failed := [null]
	npc.failed.connect(func(m: String) -> void: failed[0] = m)
	var empty: String = await npc.say("")
	check(empty == "" and failed[0] != null and not npc.is_busy(), "npc.say(\"\") fails: %s"
		% failed[0])
	var info := model.info()
	var ints := 0
	var floats_integral := 0
	for k: String in info:
		if typeof(info[k]) == TYPE_INT:
			ints += 1
		elif typeof(info[k]) == TYPE_FLOAT and info[k] == floorf(info[k]) and k != "load_ms":
			floats_integral += 1
	check(ints > 3 and typeof(info.get("n_vocab", info.get("vocab_size", 0))) == TYPE_INT,
		"info() has integers as int (%d ints, %d integral floats)" % [ints, floats_integral])
	npc.queue_free()


# fault 2 and 6: a .gguf is a resource; a broken one says so when it loads
func test_resource_loader(_model: GeistModel, _bytes: PackedByteArray) -> void:
	check("gguf" in ResourceLoader.get_recognized_extensions_for_type("GeistModel"),
		"ResourceLoader knows .gguf")
	if FileAccess.file_exists("res://model.gguf"):
		var m = load("res://model.gguf")
		check(m is GeistModel and m.is_loaded(), "load(\"res://model.gguf\") gives a GeistModel")
		check(m.resource_path == "res://model.gguf", "with its resource_path")
	var f := FileAccess.open("res://garbage.gguf", FileAccess.WRITE)
	f.store_string("this is not a model")
	f.close()
	var g := GeistModel.new()
	g.model_path = "res://garbage.gguf"
	check(not g.is_loaded() and g.get_error() != "", "a garbage file: " + g.get_error())
	check(load("res://garbage.gguf") == null, "load() of a garbage .gguf fails")
	DirAccess.remove_absolute(ProjectSettings.globalize_path("res://garbage.gguf"))


# fault 8: a sampler resource shared between NPCs, presets, stop strings
func test_sampler(model: GeistModel, _bytes: PackedByteArray) -> void:
	var greedy := GeistSampler.new()
	check(greedy.apply_preset("greedy") == OK and greedy.temperature == 0.0, "greedy preset")
	check(greedy.apply_preset("nonsense") != OK, "unknown preset refused")
	check(greedy.get_presets().size() >= 3, "presets listed")
	var a := new_npc(model, 16)
	var b := new_npc(model, 16)
	a.temperature = 1.5
	b.temperature = 1.5
	a.sampler = greedy
	b.sampler = greedy
	a.say("What do you sell?")
	b.say("What do you sell?")
	var rs: Array = await GeistEngine.all_replied([a, b])
	check(rs[0] != "" and rs[0] == rs[1], "one shared greedy sampler: the same reply: " + rs[0])
	var stop := GeistSampler.new()
	stop.apply_preset("greedy")
	stop.stop = PackedStringArray([" "])
	var c := new_npc(model, 16)
	c.sampler = stop
	var rc: String = await c.say("What do you sell?")
	check(rc != "" and not " " in rc and rs[0].begins_with(rc),
		"a stop string ends the reply: '%s'" % rc)
	a.queue_free()
	b.queue_free()
	c.queue_free()


# fault 8: the context policy can be tuned
func test_context_policy(model: GeistModel, _bytes: PackedByteArray) -> void:
	var npc := new_npc(model, 16)
	npc.max_seq_len = 96
	npc.trim = false
	npc.persona = "You are Tova, the village elder."
	var fails := [0]
	npc.failed.connect(func(_m: String) -> void: fails[0] += 1)
	for line in ["Tell me about the old well.", "And the river?", "What about the king?",
			"Goodbye, elder."]:
		await npc.say(line)
	check(fails[0] > 0, "trim = false: a conversation over the cap fails (%d)" % fails[0])
	check(npc.keep_first == -1 and npc.keep_last == 1 and npc.reply_reserve == -1,
		"keep_first / keep_last / reply_reserve defaults")
	npc.queue_free()


# configuration warnings
func test_warnings(model: GeistModel, _bytes: PackedByteArray) -> void:
	var npc := GeistNPC.new()
	check(npc.get_warnings().size() == 1 and "model" in npc.get_warnings()[0],
		"no model: " + str(npc.get_warnings()))
	var broken := GeistModel.new()
	broken.load_file("/nonexistent/x.gguf")
	npc.model = broken
	check(npc.get_warnings().size() == 1 and "does not load" in npc.get_warnings()[0],
		"a model that fails: " + str(npc.get_warnings()))
	npc.model = model
	check(npc.get_warnings().is_empty(), "a loaded model: no warning")
	npc.max_seq_len = 8
	check(npc.get_warnings().size() == 1 and "persona" in npc.get_warnings()[0],
		"a cap below the persona: " + str(npc.get_warnings()))
	npc.free()
