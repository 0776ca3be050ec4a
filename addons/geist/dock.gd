@tool
extends ScrollContainer
## The Geist dock: open a .gguf, read its facts and memory table (weights mapped or aliased vs
## owned, KV per NPC for a cap and KV mode, how many NPCs fit a budget with the weights counted),
## and a playground that streams a reply with its tokens/s, as typed here or as any GeistNPC of
## the open scene would answer (its model, persona, sampler, cap and KV mode).
##
## Widget names (for tests and tools): ModelPath, Browse, Load, Info, KVCap, KVMode, Budget,
## Costs, PlayNPC, Refresh, Persona, MaxTokens, Preset, Line, Reply, Stats.

const CUSTOM := "(settings below)"

var model: GeistModel
var session: GeistSession
var path_edit: LineEdit
var info_label: RichTextLabel
var cap_spin: SpinBox
var mode_pick: OptionButton
var budget_spin: SpinBox
var table: RichTextLabel
var npc_pick: OptionButton
var persona_edit: TextEdit
var tokens_spin: SpinBox
var preset_pick: OptionButton
var line_edit: LineEdit
var reply_label: RichTextLabel
var stats_label: Label
var file_dialog: EditorFileDialog
var t_first := 0
var n_tokens := 0
var npcs: Array[NodePath] = []


func _ready() -> void:
	custom_minimum_size = Vector2(280, 0)
	horizontal_scroll_mode = SCROLL_MODE_DISABLED
	var box := VBoxContainer.new()
	box.size_flags_horizontal = SIZE_EXPAND_FILL
	add_child(box)
	var row := HBoxContainer.new()
	box.add_child(row)
	path_edit = _named(LineEdit.new(), "ModelPath")
	path_edit.placeholder_text = "res://model.gguf"
	path_edit.size_flags_horizontal = SIZE_EXPAND_FILL
	row.add_child(path_edit)
	var browse: Button = _named(Button.new(), "Browse")
	browse.text = "Open…"
	browse.pressed.connect(_on_browse)
	row.add_child(browse)
	var load_btn: Button = _named(Button.new(), "Load")
	load_btn.text = "Load"
	load_btn.pressed.connect(func() -> void: open_model(path_edit.text))
	row.add_child(load_btn)
	info_label = _named(_rich(90), "Info")
	box.add_child(info_label)

	var grid := GridContainer.new()
	grid.columns = 2
	box.add_child(grid)
	grid.add_child(_label("KV cap (tokens)"))
	cap_spin = _named(_spin(16, 8192, 16, 256), "KVCap")
	cap_spin.value_changed.connect(func(_v: float) -> void: refresh_table())
	grid.add_child(cap_spin)
	grid.add_child(_label("KV mode"))
	mode_pick = _named(OptionButton.new(), "KVMode")
	for i in kv_mode_names().size():
		mode_pick.add_item(kv_mode_names()[i], i)
	mode_pick.select(GeistSession.KV_F16)
	mode_pick.item_selected.connect(func(_i: int) -> void: refresh_table())
	grid.add_child(mode_pick)
	grid.add_child(_label("Budget (MB)"))
	budget_spin = _named(_spin(0, 65536, 1, 256), "Budget")
	budget_spin.value_changed.connect(func(_v: float) -> void: refresh_table())
	grid.add_child(budget_spin)
	table = _named(_rich(170), "Costs")
	box.add_child(table)

	box.add_child(HSeparator.new())
	box.add_child(_label("Playground"))
	var npc_row := HBoxContainer.new()
	box.add_child(npc_row)
	npc_pick = _named(OptionButton.new(), "PlayNPC")
	npc_pick.size_flags_horizontal = SIZE_EXPAND_FILL
	npc_pick.item_selected.connect(_on_npc_picked)
	npc_row.add_child(npc_pick)
	var refresh: Button = _named(Button.new(), "Refresh")
	refresh.text = "Scene NPCs"
	refresh.tooltip_text = "List the GeistNPC nodes of the open scene"
	refresh.pressed.connect(refresh_npcs)
	npc_row.add_child(refresh)
	persona_edit = _named(TextEdit.new(), "Persona")
	persona_edit.custom_minimum_size = Vector2(0, 60)
	persona_edit.wrap_mode = TextEdit.LINE_WRAPPING_BOUNDARY
	persona_edit.text = "You are Bram, the village blacksmith. Answer in one short sentence."
	box.add_child(persona_edit)
	var play := GridContainer.new()
	play.columns = 2
	box.add_child(play)
	play.add_child(_label("Max tokens"))
	tokens_spin = _named(_spin(1, 1024, 1, 48), "MaxTokens")
	play.add_child(tokens_spin)
	play.add_child(_label("Sampler"))
	preset_pick = _named(OptionButton.new(), "Preset")
	for p: String in GeistSampler.new().get_presets():
		preset_pick.add_item(p)
	preset_pick.select(1)
	play.add_child(preset_pick)
	line_edit = _named(LineEdit.new(), "Line")
	line_edit.placeholder_text = "Say something and press Enter"
	line_edit.text_submitted.connect(_on_say)
	box.add_child(line_edit)
	reply_label = _named(_rich(100), "Reply")
	box.add_child(reply_label)
	stats_label = _named(_label(""), "Stats")
	box.add_child(stats_label)
	refresh_npcs()


## The KV modes as the GeistNPC.kv_mode property lists them (all five of geist.h).
static func kv_mode_names() -> PackedStringArray:
	for p in ClassDB.class_get_property_list("GeistNPC"):
		if p.name == "kv_mode":
			return str(p.hint_string).split(",")
	return PackedStringArray(["F32", "F16", "INT8", "INT4", "KIVI2"])


static func mb(b: float) -> String:
	return "%.2f MB" % (b / 1048576.0)


func _named(c: Control, n: String) -> Control:
	c.name = n
	return c


func _spin(lo: float, hi: float, step: float, value: float) -> SpinBox:
	var s := SpinBox.new()
	s.min_value = lo
	s.max_value = hi
	s.step = step
	s.value = value
	return s


func _rich(h: float) -> RichTextLabel:
	var r := RichTextLabel.new()
	r.custom_minimum_size = Vector2(0, h)
	r.bbcode_enabled = true
	r.selection_enabled = true
	r.fit_content = true
	return r


func _label(t: String) -> Label:
	var l := Label.new()
	l.text = t
	return l


func _on_browse() -> void:
	if file_dialog == null:
		file_dialog = EditorFileDialog.new()
		file_dialog.file_mode = EditorFileDialog.FILE_MODE_OPEN_FILE
		file_dialog.access = EditorFileDialog.ACCESS_FILESYSTEM
		file_dialog.add_filter("*.gguf", "GGUF models")
		file_dialog.file_selected.connect(func(p: String) -> void:
			path_edit.text = p
			open_model(p))
		add_child(file_dialog)  # a popup: outside the scrolled box
	file_dialog.popup_file_dialog()


func open_model(path: String) -> void:
	var m := GeistModel.new()
	if m.load_file(path) != OK:
		info_label.text = "[color=red]%s[/color]" % m.get_error()
		table.text = ""
		return
	use_model(m, path)


func use_model(m: GeistModel, path: String) -> void:
	session = null
	model = m
	path_edit.text = path
	var i := model.info()
	info_label.text = "[b]%s[/b] (%s)\n%d layers, d_model %d, vocab %d, context %d\nbackend %s, loaded in %.1f ms" % [
		i.get("name", path.get_file()), i.get("architecture", "?"), i.get("n_layer", 0),
		i.get("d_model", 0), i.get("n_vocab", 0), i.get("n_ctx_train", 0), i.get("backend", ""),
		i.get("load_ms", 0.0)]
	refresh_table()


## The costs: the model once (its weights are resident when used, mapped or aliased, so they
## count against the budget), then each NPC's KV cache and scratch.
func refresh_table() -> void:
	if model == null or not model.is_loaded():
		return
	var m := model.memory()
	var cost := model.session_cost(int(cap_spin.value), mode_pick.get_selected_id())
	var weights: int = m.weights_aliased + m.weights_owned
	var once: int = weights + m.owned_total - m.weights_owned
	var per_npc: int = cost.get("total", 0)
	var budget := budget_spin.value * 1048576.0
	var fit := int(maxf(0.0, budget - once) / maxf(per_npc, 1))
	table.text = "\n".join([
		"[table=2]",
		"[cell]weights (%s)[/cell][cell]%s[/cell]" % ["mapped" if m.mapped_file > 0 else "aliased", mb(weights)],
		"[cell]weights owned[/cell][cell]%s[/cell]" % mb(m.weights_owned),
		"[cell]tokenizer[/cell][cell]%s[/cell]" % mb(m.tokenizer),
		"[cell]metadata + other[/cell][cell]%s[/cell]" % mb(m.metadata + m.other + m.rope_tables),
		"[cell]model, once[/cell][cell]%s[/cell]" % mb(once),
		"[cell]KV per NPC (%s, cap %d)[/cell][cell]%s[/cell]" % [mode_pick.get_item_text(mode_pick.selected), cap_spin.value, mb(cost.get("kv_cache", 0))],
		"[cell]scratch per NPC[/cell][cell]%s[/cell]" % mb(cost.get("scratch", 0)),
		"[cell]NPCs in %d MB (weights counted)[/cell][cell]%d[/cell]" % [budget_spin.value, fit],
		"[/table]",
		"source: %s" % m.source])


## Lists the GeistNPC nodes of the scene open in the editor.
func refresh_npcs() -> void:
	npc_pick.clear()
	npcs.clear()
	npc_pick.add_item(CUSTOM)
	var root: Node = EditorInterface.get_edited_scene_root() if Engine.is_editor_hint() else null
	if root == null:
		return
	for n: Node in [root] + root.find_children("*", "GeistNPC", true, false):
		if n is GeistNPC:
			npcs.append(root.get_path_to(n))
			npc_pick.add_item(str(n.name))


func scene_npc() -> GeistNPC:
	var i := npc_pick.selected - 1
	var root: Node = EditorInterface.get_edited_scene_root() if Engine.is_editor_hint() else null
	if i < 0 or i >= npcs.size() or root == null:
		return null
	return root.get_node_or_null(npcs[i]) as GeistNPC


func _on_npc_picked(_i: int) -> void:
	var npc := scene_npc()
	session = null
	if npc == null:
		return
	persona_edit.text = npc.persona
	tokens_spin.value = npc.max_tokens
	cap_spin.value = npc.max_seq_len
	mode_pick.select(npc.kv_mode)
	if npc.model != null and npc.model.is_loaded():
		use_model(npc.model, npc.model.resource_path)


func session_options() -> Dictionary:
	var opts := {"kv_mode": mode_pick.get_selected_id(), "max_tokens": int(tokens_spin.value)}
	var npc := scene_npc()
	var sampler: GeistSampler = npc.sampler if npc != null else null
	if sampler == null and npc == null:
		sampler = GeistSampler.new()
		sampler.apply_preset(preset_pick.get_item_text(preset_pick.selected))
	if sampler != null:
		for key: String in ["temperature", "top_k", "top_p", "min_p", "repeat_penalty",
				"frequency_penalty", "presence_penalty", "penalty_last_n", "seed", "stop"]:
			opts[key] = sampler.get(key)
	else:
		for key: String in ["temperature", "top_k", "top_p", "min_p", "repeat_penalty", "seed"]:
			opts[key] = npc.get(key)
	if npc != null:
		for key: String in ["trim", "keep_first", "keep_last", "reply_reserve"]:
			opts[key] = npc.get(key)
	return opts


func _on_say(text: String) -> void:
	if model == null or not model.is_loaded() or text.strip_edges() == "":
		return
	if session == null or session.get_max_seq_len() != int(cap_spin.value):
		session = model.create_session(int(cap_spin.value), session_options())
		if session == null:
			reply_label.text = "[color=red]%s[/color]" % model.get_error()
			return
		session.token.connect(_on_token)
		session.finished.connect(_on_done)
		session.failed.connect(func(msg: String) -> void:
			reply_label.append_text("\n[color=red]%s[/color]" % msg))
	else:
		var opts := session_options()
		opts.erase("kv_mode")
		session.configure(opts)
	session.system_prompt = persona_edit.text
	reply_label.text = ""
	n_tokens = 0
	t_first = Time.get_ticks_usec()
	session.say(text)
	line_edit.clear()


func _on_token(piece: String) -> void:
	n_tokens += 1
	reply_label.append_text(piece)
	var dt := (Time.get_ticks_usec() - t_first) / 1e6
	stats_label.text = "%d tokens, %.1f tokens/s" % [n_tokens, n_tokens / maxf(dt, 1e-6)]


func _on_done(_text: String) -> void:
	var st := session.last_stats()
	stats_label.text = "%d tokens, %.1f tokens/s decode, first token after %.0f ms, %d/%d tokens used" % [
		st.generated_tokens, st.generated_tokens / maxf(st.decode_ms / 1000.0, 1e-6),
		st.first_token_ms, session.tokens_used, session.get_max_seq_len()]
