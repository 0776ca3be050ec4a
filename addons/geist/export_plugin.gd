@tool
extends EditorExportPlugin
## Exports every .gguf model the exported scenes, resources and scripts name.
##
## A .gguf is a GeistModel resource (GeistModelLoader), so a model a scene holds as an
## ext_resource is exported as its dependency already. This plugin adds the models named only by
## path: a GeistModel sub-resource's model_path, or a script's load("res://npc.gguf"). It also
## adds geist.gdextension and .godot/extension_list.cfg, which an export of selected scenes
## leaves out (then nothing finds GeistNPC). A file exported both ways is stored once.

const SCANNED := ["tscn", "tres", "gd", "cfg", "json"]
const GGUF_PATH := "res://[^\"'\\s]+\\.gguf"
const EXTENSION := "res://addons/geist/geist.gdextension"
const EXTENSION_LIST := "res://.godot/extension_list.cfg"

var _seen: Dictionary[String, bool] = {}
var _added: Dictionary[String, bool] = {}
var _regex := RegEx.create_from_string(GGUF_PATH)


func _get_name() -> String:
	return "GeistModels"


func _export_begin(_features: PackedStringArray, _is_debug: bool, _path: String,
		_flags: int) -> void:
	_seen.clear()
	_added.clear()
	add_model(EXTENSION)
	var listed := FileAccess.get_file_as_string(EXTENSION_LIST)
	if not EXTENSION in listed:
		listed += EXTENSION + "\n"
	_added[EXTENSION_LIST] = true
	add_file(EXTENSION_LIST, listed.to_utf8_buffer(), false)


func _export_file(path: String, _type: String, _features: PackedStringArray) -> void:
	var ext := path.get_extension().to_lower()
	if ext == "gguf" or path == EXTENSION or path == EXTENSION_LIST:
		if _added.has(path):
			skip()  # already stored by add_model()
		else:
			_seen[path] = true
		return
	if ext not in SCANNED:
		return
	var text := FileAccess.get_file_as_string(path)
	for m in _regex.search_all(text):
		add_model(m.get_string())


func add_model(path: String) -> void:  # a .gguf, or the .gdextension
	if _seen.has(path) or _added.has(path):
		return
	if not FileAccess.file_exists(path):
		push_warning("geist: %s is named for export but does not exist" % path)
		return
	_added[path] = true
	add_file(path, FileAccess.get_file_as_bytes(path), false)
