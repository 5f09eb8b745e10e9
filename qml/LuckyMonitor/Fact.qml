import QtQuick
import QtQuick.Controls
import QtQuick.Layouts

// One "key   value" row; a value too long for the row is elided and shown whole
// in a tool tip.
RowLayout {
    id: root
    property string key
    property string value
    property color valueColor: Theme.text

    Layout.fillWidth: true
    spacing: 8

    Label {
        text: root.key
        color: Theme.dim
        Layout.preferredWidth: Theme.keyWidth
        elide: Text.ElideRight
    }
    Label {
        id: valueLabel
        text: root.value
        color: root.valueColor
        Layout.fillWidth: true
        elide: Text.ElideMiddle

        HoverHandler { id: hover }
        ToolTip.visible: hover.hovered && valueLabel.truncated
        ToolTip.text: root.value
        ToolTip.delay: 400
    }
}
