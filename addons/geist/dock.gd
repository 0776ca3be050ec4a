@tool
extends VBoxContainer
## The Geist dock: open a .gguf, read its facts and memory table (weights aliased vs owned, KV per
## NPC for a cap and KV mode, how many NPCs fit a budget), and a playground that streams a reply
## with its tokens/s.

var model: GeistModel
var session: GeistSession
var path_edit: LineEdit
var info_label: RichTextLabel
var cap_spin: SpinBox
var mode_pick: OptionButton
var budget_spin: SpinBox
var table: RichTextLabel
var persona_edit: TextEdit
var line_edit: LineEdit
var reply_label: RichTextLabel
var stats_label: Label
var file_dialog: EditorFileDialog
var t_first := 0
var n_tokens := 0


func _ready() -> void:
	custom_minimum_size = Vector2(280, 0)
	var row := HBoxContainer.new()
	add_child(row)
	path_edit = LineEdit.new()
	path_edit.placeholder_text = "res://model.gguf"
	path_edit.size_flags_horizontal = SIZE_EXPAND_FILL
	row.add_child(path_edit)
	var browse := Button.new()
	browse.text = "Open…"
	browse.pressed.connect(_on_browse)
	row.add_child(browse)
	var load_btn := Button.new()
	load_btn.text = "Load"
	load_btn.pressed.connect(func(): open_model(path_edit.text))
	row.add_child(load_btn)
	info_label = _rich(90)
	add_child(info_label)

	var grid := GridContainer.new()
	grid.columns = 2
	add_child(grid)
	grid.add_child(_label("KV cap (tokens)"))
	cap_spin = SpinBox.new()
	cap_spin.min_value = 16
	cap_spin.max_value = 8192
	cap_spin.step = 16
	cap_spin.value = 256
	cap_spin.value_changed.connect(func(_v): refresh_table())
	grid.add_child(cap_spin)
	grid.add_child(_label("KV mode"))
	mode_pick = OptionButton.new()
	mode_pick.add_item("F32", 0)
	mode_pick.add_item("F16", 1)
	mode_pick.select(1)
	mode_pick.item_selected.connect(func(_i): refresh_table())
	grid.add_child(mode_pick)
	grid.add_child(_label("Budget (MB)"))
	budget_spin = SpinBox.new()
	budget_spin.max_value = 65536
	budget_spin.value = 256
	budget_spin.value_changed.connect(func(_v): refresh_table())
	grid.add_child(budget_spin)
	table = _rich(150)
	add_child(table)

	add_child(_label("Playground persona"))
	persona_edit = TextEdit.new()
	persona_edit.custom_minimum_size = Vector2(0, 60)
	persona_edit.text = "You are Bram, the village blacksmith. Answer in one short sentence."
	add_child(persona_edit)
	line_edit = LineEdit.new()
	line_edit.placeholder_text = "Say something and press Enter"
	line_edit.text_submitted.connect(_on_say)
	add_child(line_edit)
	reply_label = _rich(100)
	add_child(reply_label)
	stats_label = _label("")
	add_child(stats_label)


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
		file_dialog.file_selected.connect(func(p): path_edit.text = p; open_model(p))
		add_child(file_dialog)
	file_dialog.popup_file_dialog()


static func mb(b: float) -> String:
	return "%.2f MB" % (b / 1048576.0)


func open_model(path: String) -> void:
	session = null
	model = GeistModel.new()
	if model.load_file(path) != OK:
		info_label.text = "[color=red]%s[/color]" % model.get_error()
		table.text = ""
		return
	var i := model.info()
	info_label.text = "[b]%s[/b] (%s)\n%d layers, d_model %d, vocab %d, context %d\nbackend %s, loaded in %.1f ms" % [
		i.get("name", path.get_file()), i.get("architecture", "?"), i.get("n_layer", 0),
		i.get("d_model", 0), i.get("n_vocab", 0), i.get("n_ctx_train", 0), i.get("backend", ""),
		i.get("load_ms", 0.0)]
	refresh_table()


func refresh_table() -> void:
	if model == null or not model.is_loaded():
		return
	var m := model.memory()
	var cost := model.session_cost(int(cap_spin.value), mode_pick.get_selected_id())
	var owned: int = m.owned_total
	var per_npc: int = cost.get("total", 0)
	var budget := budget_spin.value * 1048576.0
	var fit := int(max(0.0, budget - owned) / max(per_npc, 1))
	table.text = "\n".join([
		"[table=2]",
		"[cell]weights aliased[/cell][cell]%s[/cell]" % mb(m.weights_aliased),
		"[cell]weights owned[/cell][cell]%s[/cell]" % mb(m.weights_owned),
		"[cell]tokenizer[/cell][cell]%s[/cell]" % mb(m.tokenizer),
		"[cell]metadata + other[/cell][cell]%s[/cell]" % mb(m.metadata + m.other + m.rope_tables),
		"[cell]KV per NPC (cap %d)[/cell][cell]%s[/cell]" % [cap_spin.value, mb(cost.get("kv_cache", 0))],
		"[cell]scratch per NPC[/cell][cell]%s[/cell]" % mb(cost.get("scratch", 0)),
		"[cell]NPCs in %d MB[/cell][cell]%d[/cell]" % [budget_spin.value, fit],
		"[/table]",
		"source: %s" % m.source])


func _on_say(text: String) -> void:
	if model == null or not model.is_loaded() or text.strip_edges() == "":
		return
	if session == null or session.get_max_seq_len() != int(cap_spin.value):
		session = model.create_session(int(cap_spin.value), {"kv_mode": mode_pick.get_selected_id()})
		if session == null:
			reply_label.text = "[color=red]%s[/color]" % model.get_error()
			return
		session.token.connect(_on_token)
		session.finished.connect(_on_done)
		session.failed.connect(func(msg): reply_label.append_text("\n[color=red]%s[/color]" % msg))
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
	stats_label.text = "%d tokens, %.1f tokens/s" % [n_tokens, n_tokens / max(dt, 1e-6)]


func _on_done(_text: String) -> void:
	var st := session.last_stats()
	stats_label.text = "%d tokens, %.1f tokens/s decode, first token after %.0f ms, %d/%d tokens used" % [
		st.generated_tokens, st.generated_tokens / max(st.decode_ms / 1000.0, 1e-6),
		st.first_token_ms, session.tokens_used, session.get_max_seq_len()]
