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
        textFormat: Text.PlainText  // never markup: engine text shows as the characters it is
        color: Theme.dim
        Layout.preferredWidth: Theme.keyWidth
        elide: Text.ElideRight
    }
    Label {
        id: valueLabel
        text: root.value
        textFormat: Text.PlainText  // never markup: engine text shows as the characters it is
        color: root.valueColor
        Layout.fillWidth: true
        elide: Text.ElideMiddle

        HoverHandler { id: hover }
        ToolTip.visible: hover.hovered && valueLabel.truncated
        ToolTip.text: root.value
        ToolTip.delay: 400
    }
}
