# Headless test of NPC actions in the geist Godot extension (issue 19): an NPC with two actions
# replies, `acted` fires with typed arguments, and ask_json() completes with a parsed value.
# Run by tests/godot/test_godot.py::test_npc_actions:
#   godot --headless --path PROJECT --script res://test_actions.gd -- --model /path/model.gguf
# Exit code = number of failed checks.
extends SceneTree

const GIVE_ITEM: Dictionary = {
	"name": "give_item",
	"description": "Hand the player an item from your stock.",
	"parameters": {
		"type": "object",
		"properties": {
			"item": {"type": "string", "enum": ["sword", "shield", "potion"]},
			"count": {"type": "integer", "minimum": 1, "maximum": 3},
			"gift": {"type": "boolean"},
		},
		"required": ["item", "count", "gift"],
		"additionalProperties": false,
	},
}
const OPEN_GATE: Dictionary = {"name": "open_gate", "description": "Open the village gate."}

var failures := 0
var checks := 0
var model_path := ""


func check(cond: bool, what: String) -> void:
	checks += 1
	if cond:
		print("  ok   ", what)
	else:
		failures += 1
		print("  FAIL ", what)


func _init() -> void:
	var args := OS.get_cmdline_user_args()
	var i := args.find("--model")
	if i >= 0 and i + 1 < args.size():
		model_path = args[i + 1]
	run.call_deferred()


func new_npc(model: GeistModel) -> GeistNPC:
	var npc := GeistNPC.new()
	npc.model = model
	npc.persona = "You are Brom, the village blacksmith. Answer in one short sentence."
	npc.temperature = 0.0
	npc.max_tokens = 64
	npc.max_seq_len = 512
	root.add_child(npc)
	return npc


func run() -> void:
	var model := GeistModel.new()
	if model_path == "" or model.load_file(model_path) != OK:
		print("no model: pass -- --model PATH")
		quit(100)
		return
	var t0 := Time.get_ticks_msec()
	await test_acted(model)
	await test_acted_auto(model)
	await test_ask_json(model)
	await test_bad_actions(model)
	print("%d checks, %d failed, %d ms" % [checks, failures, Time.get_ticks_msec() - t0])
	quit(failures)


func test_acted(model: GeistModel) -> void:
	print("[acted]")
	var npc := new_npc(model)
	npc.actions = [GIVE_ITEM, OPEN_GATE]
	npc.action_choice = GeistNPC.ACTION_REQUIRED  # the reply ends with a call
	var calls: Array = []
	var order: Array[String] = []
	npc.acted.connect(func(n: StringName, a: Dictionary) -> void:
		calls.append([n, a])
		order.append("acted"))
	npc.finished.connect(func(_t: String) -> void: order.append("finished"))
	var streamed: Array[String] = []  # lambdas capture locals by value: collect in an Array
	npc.token.connect(func(piece: String) -> void: streamed.append(piece))
	var reply: String = await npc.say("I need a sword for the journey, please give me one.")
	print("  reply: ", reply, "  calls: ", calls)
	check(calls.size() == 1, "acted fired once")
	check(order == ["acted", "finished"], "acted comes before finished: %s" % [order])
	check(reply == "".join(streamed), "the reply is the streamed speech")
	check(not reply.contains("<call>"), "the call line is not in the reply")
	if calls.size() == 1:
		var name: StringName = calls[0][0]
		var args: Dictionary = calls[0][1]
		check(typeof(calls[0][0]) == TYPE_STRING_NAME, "name is a StringName")
		check(name in [&"give_item", &"open_gate"], "name is a declared action: %s" % name)
		if name == &"give_item":
			check(typeof(args.get("item")) == TYPE_STRING, "item is a String")
			check(args.get("item") in ["sword", "shield", "potion"], "item is in the enum")
			check(typeof(args.get("count")) == TYPE_INT, "count is an int")
			check(int(args.get("count", 0)) >= 1 and int(args.get("count", 0)) <= 3,
				"count within its bounds")
			check(typeof(args.get("gift")) == TYPE_BOOL, "gift is a bool")
			check(args.size() == 3, "no other arguments")
		else:
			check(args.is_empty(), "open_gate has no arguments")
	# the transcript keeps the call, so the next turn knows what the NPC did
	var transcript: Array = npc.get_session().get_transcript()
	var last: Dictionary = transcript[transcript.size() - 1]
	check(str(last.content).contains("<call>{\"name\":"), "the transcript keeps the call line")
	npc.queue_free()


func test_acted_auto(model: GeistModel) -> void:
	print("[acted_auto]")
	var npc := new_npc(model)
	npc.actions = [GIVE_ITEM, OPEN_GATE]
	var calls: Array = []
	npc.acted.connect(func(n: StringName, a: Dictionary) -> void: calls.append([n, a]))
	var reply: String = await npc.say("Good morning, Brom!")
	print("  reply: ", reply, "  calls: ", calls)
	check(reply != "" or calls.size() == 1, "the NPC spoke or acted")
	check(calls.size() <= 1, "at most one call")
	npc.queue_free()


func test_ask_json(model: GeistModel) -> void:
	print("[ask_json]")
	var npc := new_npc(model)
	var schema := {
		"type": "object",
		"properties": {
			"mood": {"type": "string", "enum": ["happy", "angry", "sad"]},
			"price": {"type": "integer", "minimum": 1, "maximum": 100},
		},
		"required": ["mood", "price"],
		"additionalProperties": false,
	}
	var got: Variant = await npc.ask_json("How much for a sword, and how do you feel?", schema)
	print("  ask_json: ", got)
	check(typeof(got) == TYPE_DICTIONARY, "ask_json completes with a Dictionary")
	if typeof(got) == TYPE_DICTIONARY:
		var d: Dictionary = got
		check(d.get("mood") in ["happy", "angry", "sad"], "mood in the enum")
		check(typeof(d.get("price")) == TYPE_INT, "price is an int")
	var json := JSON.new()
	check(json.parse(npc.get_last_reply()) == OK, "the reply text parses as JSON")
	npc.queue_free()


func test_bad_actions(model: GeistModel) -> void:
	print("[bad_actions]")
	var npc := new_npc(model)
	npc.actions = [{"name": "give item"}]
	var failed: Array[String] = []
	npc.failed.connect(func(m: String) -> void: failed.append(m))
	var reply: String = await npc.say("Hello")
	check(reply == "", "a bad action name gives an empty reply")
	check(failed.size() == 1 and failed[0].contains("name"), "failed names the problem: %s" % [failed])
	npc.actions = [OPEN_GATE]
	var calls: Array = []
	npc.acted.connect(func(n: StringName, _a: Dictionary) -> void: calls.append(n))
	npc.action_choice = GeistNPC.ACTION_REQUIRED
	var reply2: String = await npc.say("Open the gate, please!")
	print("  reply: ", reply2, " calls: ", calls)
	check(calls == [&"open_gate"], "after fixing the actions the NPC acts")
	npc.queue_free()
