@tool
extends EditorPlugin
## Test only (tests/godot/test_godot.py::test_editor_screenshot): under Xvfb, opens
## res://smith.tscn, selects its GeistNPC, saves the Geist dock and the Inspector as PNGs into
## the folder named by the GEIST_SHOT_DIR project setting and the dock's widgets as JSON, quits.


func _enter_tree() -> void:
	run.call_deferred()


func wait(s: float) -> void:
	await get_tree().create_timer(s).timeout


func run() -> void:
	var out := str(ProjectSettings.get_setting("geist_test/shot_dir", "user://"))
	await wait(4.0)
	EditorInterface.open_scene_from_path("res://smith.tscn")
	await wait(2.0)
	var npc := EditorInterface.get_edited_scene_root() as GeistNPC
	var base := EditorInterface.get_base_control()
	var dock := base.find_child("Geist", true, false)
	var report := {"npc": npc != null, "dock": dock != null}
	if npc != null:
		EditorInterface.get_selection().clear()
		EditorInterface.get_selection().add_node(npc)
		EditorInterface.edit_node(npc)
	if dock != null:
		dock.refresh_npcs()
		var picker: OptionButton = dock.find_child("PlayNPC", true, false)
		if picker != null and picker.item_count > 1:
			picker.select(1)  # the scene's GeistNPC: its model, persona, cap and KV mode
			picker.item_selected.emit(1)
		var names := []
		for c in dock.find_children("*", "Control", true, false):
			if not str(c.name).begins_with("@"):
				names.append(str(c.name))
		report["widgets"] = names
		var modes: OptionButton = dock.find_child("KVMode", true, false)
		report["kv_modes"] = modes.item_count if modes else -1
		var pick: OptionButton = dock.find_child("PlayNPC", true, false)
		report["scene_npcs"] = pick.item_count - 1 if pick else -1
		report["costs"] = (dock.find_child("Costs", true, false) as RichTextLabel).get_parsed_text()
	if npc != null:
		report["warnings"] = npc.get_warnings()
	await wait(2.0)
	var img := base.get_viewport().get_texture().get_image()
	img.save_png(out.path_join("editor.png"))
	if dock != null:
		img.get_region(Rect2i((dock as Control).get_global_rect())).save_png(out.path_join("dock.png"))
	var inspector := EditorInterface.get_inspector()
	img.get_region(Rect2i(inspector.get_global_rect())).save_png(out.path_join("inspector.png"))
	report["size"] = [img.get_width(), img.get_height()]
	var f := FileAccess.open(out.path_join("report.json"), FileAccess.WRITE)
	f.store_string(JSON.stringify(report))
	f.close()
	get_tree().quit(0)
